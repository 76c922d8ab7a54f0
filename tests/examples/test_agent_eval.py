"""The TSA eval's items and scoring (no model): items are well-formed, scores and the confusion
matrix count what they say, the report and its PNG are written."""
from __future__ import annotations

import json

from examples.agent.eval import NONE, TOOLS, confusion, load_items, score_item, summarise, write_report
from examples.agent.loop import Action, RunResult, Step


def run_with(*calls: tuple[str, dict | None], finish: str = "tool_calls", thought: str | None = None) -> RunResult:
    step = Step(iteration=1, thought=thought, finish_reason=finish,
                actions=[Action(id=f"c{i}", name=n, arguments=a, raw_arguments=json.dumps(a)) for i, (n, a) in enumerate(calls)])
    return RunResult(question="q", answer="a", steps=[step], latency_s=1.0)


def test_items_cover_the_seed_cases_and_two_tool_questions():
    items = load_items()
    assert len(items) >= 40 and len({i["id"] for i in items}) == len(items)
    by_question = {i["question"]: i["expected_tools"] for i in items}
    assert by_question["How many orders in March?"] == ["sql_query"]
    assert by_question["What does the returns policy say?"] == ["vector_search"]
    assert by_question["What is the price of copper today?"] == ["web_search"]
    assert by_question["Sum the Q3 contracts"] == ["sql_query"]
    assert sum(len(i["expected_tools"]) == 2 for i in items) >= 5
    for item in items:
        assert set(item["key_args"]) == set(item["expected_tools"]), item["id"]
    for tool in TOOLS:
        assert sum(tool in i["expected_tools"] for i in items) >= 8


def test_no_eval_question_is_quoted_in_a_tool_description(tmp_path):
    """The descriptions give examples; none may be an eval question (that would score the copy)."""
    from examples.agent import default_tools
    from examples.agent.vector_tool import VectorIndex, load_chunks

    tools = default_tools(db_path=tmp_path / "db.sqlite", index=VectorIndex(load_chunks()))  # the model never loads
    for tool in tools:
        for item in load_items():
            assert item["question"].lower().rstrip("?.") not in tool.description.lower(), (tool.name, item["id"])


def test_score_exact_set_and_key_arguments():
    item = {"id": "x", "question": "q", "expected_tools": ["sql_query", "vector_search"],
            "key_args": {"sql_query": ["orders", "03|march"], "vector_search": ["return"]}}
    good = score_item(item, run_with(("sql_query", {"query": "SELECT count(*) FROM orders WHERE m = ?", "params": ["03"]}),
                                     ("vector_search", {"query": "returns policy"})))
    assert good.exact and good.args_ok == {"sql_query": True, "vector_search": True}
    partial = score_item(item, run_with(("sql_query", {"query": "SELECT * FROM contracts"})))
    assert not partial.exact and partial.args_ok == {"sql_query": False}
    none = score_item(item, run_with(finish="length", thought='{"name": "sql_query", "arguments": {"query": "SEL'))
    assert none.chosen == [] and none.cut_calls == 1


def test_confusion_and_summary():
    items = [{"id": "a", "question": "q", "expected_tools": ["sql_query"], "key_args": {"sql_query": []}},
             {"id": "b", "question": "q", "expected_tools": ["web_search"], "key_args": {"web_search": []}},
             {"id": "c", "question": "q", "expected_tools": ["vector_search", "web_search"],
              "key_args": {"vector_search": [], "web_search": []}}]
    scores = [score_item(items[0], run_with(("sql_query", {"query": "x"}))),
              score_item(items[1], run_with(("vector_search", {"query": "x"}))),
              score_item(items[2], run_with(("web_search", {"query": "x"})))]
    m = confusion(scores)
    assert m["sql_query"]["sql_query"] == 1
    assert m["web_search"]["vector_search"] == 1 and m["web_search"]["web_search"] == 1
    assert m["vector_search"][NONE] == 1
    s = summarise(scores)
    assert s["tsa"] == round(1 / 3, 3)
    assert s["tsa_per_tool"]["web_search"]["tsa"] == 0.5 and s["tsa_per_tool"]["vector_search"]["picked_when_not_needed"] == 1
    assert s["argument_accuracy"] == 1.0 and s["unparsable_calls"] == 0


def test_report_and_png_written(tmp_path):
    item = {"id": "a", "question": "How many?", "expected_tools": ["sql_query"], "key_args": {"sql_query": []}}
    scores = [score_item(item, run_with(("sql_query", {"query": "x"})))]
    meta = {"command": "python -m examples.agent.eval", "model": "m", "base_url": "u", "tool_choice": "auto",
            "max_iterations": 6, "max_tokens": 400, "date": "today"}
    report = write_report(tmp_path, scores, summarise(scores), meta=meta)
    text = report.read_text()
    assert "| TSA (first turn calls exactly the expected tools) | 1.000 |" in text and "![confusion matrix](confusion.png)" in text
    assert (tmp_path / "confusion.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
