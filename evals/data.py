"""Where the evals read their data: the larger shared sample when present, else the vendored one."""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["testdata_root"]

REPO = Path(__file__).resolve().parents[1]


def testdata_root() -> Path:
    """$GRAMSERVE_TESTDATA, else ``../shared/testdata`` when it lies beside the repo, else the
    sample vendored in ``tests/data`` (see its SOURCES.md)."""
    env = os.environ.get("GRAMSERVE_TESTDATA")
    if env:
        return Path(env)
    shared = (REPO / ".." / "shared" / "testdata").resolve()
    return shared if shared.is_dir() else REPO / "tests" / "data"
