"""evals/maskbench.py: a schema's judgement on the request path and the cold compile timing, on
both backends (the compile timing broke once when the constraint's text became a field)."""
from __future__ import annotations

from evals.maskbench import _default_tokenizer, compile_times, judge_schema

OBJECT = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}  # llguidance
PATTERN = {"type": "string", "pattern": "^(a|b)+c$"}  # XGrammar
REFUSED = {"oneOf": [{"type": "integer"}, {"type": "number", "multipleOf": 0.5}]}  # overlapping: strict refuses


def test_compile_times_covers_both_backends_and_skips_refused_schemas() -> None:
    records = [{"id": "o--0", "schema": OBJECT}, {"id": "p--1", "schema": PATTERN}, {"id": "r--2", "schema": REFUSED}]
    times = compile_times(records, tokenizer_dir=_default_tokenizer())
    assert sorted(times) == ["llguidance", "xgrammar"]
    assert all(len(v) == 1 and v[0] > 0 for v in times.values())


def test_judge_schema_reads_labelled_instances() -> None:
    record = {"id": "p--1", "schema": PATTERN,
              "tests": [{"data": "abac", "valid": True}, {"data": "abca", "valid": False}, {"data": "c", "valid": False}]}
    row = judge_schema(record)
    assert row["gramserve"] == "passing", row
    mislabelled = {**record, "tests": [{"data": "abca", "valid": True}]}  # a string the pattern cannot write
    assert judge_schema(mislabelled)["gramserve"] == "valid_rejected"


def test_a_raw_control_character_in_a_string_counts_as_too_loose() -> None:
    """Each valid instance is also tried with a raw tab in a string (not JSON): XGrammar's own grammar
    for a length-bounded string writes it (mlc-ai/xgrammar#800), gramserve's does not."""
    import json

    import xgrammar as xgr

    from evals.maskbench import _instances, _raw_control_texts

    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 4}}, "required": ["a"]}
    record = {"id": "b--1", "schema": schema, "tests": [{"data": {"a": "xy"}, "valid": True}]}
    assert _raw_control_texts({"k": 1, "a": ["", "xy"]}, {}) == ['{"k":1,"a":["","\ty"]}']
    assert _raw_control_texts({"a": [1, ""]}, {}) == []
    own = xgr.GrammarMatcher(xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_json_schema(
        json.dumps(schema), any_whitespace=False, separators=(",", ":")), terminate_without_stop_token=True)

    def xgrammar_alone(text: str) -> bool:
        own.reset()
        return bool(own.accept_string(text)) and own.is_terminated()

    assert _instances(xgrammar_alone, record) == (0, 1)
    row = judge_schema(record)
    assert row["gramserve"] == row["xgrammar_alone"] == "passing", row


def test_no_case_of_the_official_test_suite_is_served_too_loose() -> None:
    """The JSON-Schema-Test-Suite (draft 2020-12, vendored: 383 cases whose instances probe each keyword's
    edges) down the strict request path: no accepted schema lets an invalid instance through, and the
    schema check gives every case the request's verdict (``{"schema": true}``'s two cases once did not)."""
    from evals.maskbench import load
    from tests.testdata import VENDORED

    records = load(VENDORED / "json_schema_test_suite" / "draft2020-12")
    assert len(records) == 383 and {r["id"] for r in records} >= {"boolean_schema#0", "oneOf#0", "ref#0"}
    rows = [judge_schema(r) for r in records]
    outcomes = {row["gramserve"] for row in rows}
    assert "too_loose" not in outcomes and "timeout" not in outcomes, [r["id"] for r in rows if r["gramserve"] == "too_loose"]
    assert [r["id"] for r in rows if not r["check_agrees"]] == []
    served = sum(row["gramserve"] != "refused" for row in rows)
    assert served > 200  # (216 at 63a926a: a check that refused everything would pass the rest)
