"""The one place tests find their data.

The suite's data is vendored in ``tests/data`` (sources and licences in its ``SOURCES.md``),
so a clone of the repository alone runs every test. ``$GRAMSERVE_TESTDATA`` may point at a
larger sample laid out the same way (for example the full ``../shared/testdata``); it is
never needed, and never read unless set.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["VENDORED", "testdata_root", "testdata"]

VENDORED = Path(__file__).resolve().parent / "data"


def testdata_root() -> Path:
    """``$GRAMSERVE_TESTDATA`` when set, else the vendored sample."""
    env = os.environ.get("GRAMSERVE_TESTDATA")
    return Path(env) if env else VENDORED


def testdata(*parts: str) -> Path:
    """A path under the test data root; fails loudly (no skip) when the file is missing."""
    path = testdata_root().joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"test data missing: {path} (vendored data lives in {VENDORED})")
    return path
