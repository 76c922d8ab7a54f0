"""Fixtures for the examples/agent tests: a fresh database per test, one MiniLM index per session."""
from __future__ import annotations

from pathlib import Path

import pytest

from examples.agent.sql_tool import build_database, database_snapshot


@pytest.fixture
def agent_db(tmp_path: Path):
    """A fresh example database; the test fails if anything in it changed by the end."""
    path = build_database(tmp_path / "procurement.db")
    before = database_snapshot(path)
    yield path
    assert database_snapshot(path) == before, "the database changed"


@pytest.fixture(scope="session")
def vector_index():
    from examples.agent.vector_tool import VectorIndex

    index = VectorIndex()
    index.search("warm up", 1)  # loads MiniLM and builds the usearch index once
    return index
