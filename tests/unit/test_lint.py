"""ruff and mypy over server/, tool_parsers/ and reasoning_parsers/ (rules in pyproject.toml): part of
the unit run, so a lint or type error fails the tests like any other regression."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ["server", "tool_parsers", "reasoning_parsers"]


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed in this environment: pip install {name} (the test extra has it)")
    return found


def test_ruff_is_clean():
    r = subprocess.run([_tool("ruff"), "check", *TARGETS], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_is_clean():
    r = subprocess.run([_tool("mypy"), *TARGETS], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
