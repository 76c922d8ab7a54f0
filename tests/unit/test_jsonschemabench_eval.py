"""evals/jsonschemabench.py: prompt, 400 parsing, output scoring and aggregation (no server)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.jsonschemabench import (
    PAPER_COVERAGE,
    BenchItem,
    SchemaResult,
    build_prompt,
    check_output,
    is_schema_rejection,
    load_subset,
    markdown_report,
    matcher_counts,
    percentile,
    reject_keywords,
    summarize,
)

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}, "d": {"type": "string", "format": "date"}},
          "required": ["n"]}


def test_build_prompt_carries_schema_and_truncates_long_ones() -> None:
    short = build_prompt(SCHEMA)
    assert short.startswith("Generate a JSON object matching this schema: ")
    assert json.dumps(SCHEMA, separators=(",", ":")) in short
    big = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(500)}}
    cut = build_prompt(big, max_chars=200)
    assert "...(truncated)" in cut
    assert len(cut) < 400


def test_reject_keywords_reads_each_keyword_once_from_the_server_message() -> None:
    msg = ("This schema cannot be enforced exactly under strict mode: uniqueItems at /properties/tags is not "
           "enforced by the grammar (uniqueItems is ignored); format at /properties/d is not enforced by the grammar "
           "(day of month not checked); uniqueItems at /properties/x is not enforced by the grammar; "
           "items at / is not supported by the grammar compiler: array form. Remove these keywords, or set strict "
           "to false to have the output validated after generation.")
    assert reject_keywords(msg, "unsupported_schema") == ["uniqueItems", "format", "items"]
    assert reject_keywords("Invalid JSON Schema at /: 3 is not of type 'object'", "invalid_schema") == ["invalid_schema"]
    assert reject_keywords(None, None) == ["unknown"]


@pytest.mark.parametrize(("status", "code", "message", "expected"), [
    (400, "unsupported_schema", "x", True),
    (400, "invalid_constraint", "could not compile", True),
    (400, None, "Grammar error: unsupported keyword", True),   # another server, no code: still a refusal
    (400, "context_length_exceeded", "prompt too long", False),
    (400, None, "This model's maximum context length is 2048 tokens", False),
    (500, "internal_error", "boom", False),
])
def test_is_schema_rejection(status: int, code: str | None, message: str, expected: bool) -> None:
    assert is_schema_rejection(status, code, message) is expected


def test_check_output_validates_with_formats_and_reports_why() -> None:
    assert check_output('{"n": 3, "d": "2024-02-01"}', SCHEMA) == (True, True, None)
    parsed, valid, why = check_output('{"n": -1}', SCHEMA)
    assert (parsed, valid) == (True, False) and why.startswith("minimum at /n")
    parsed, valid, why = check_output('{"n": 1, "d": "2024-02-30"}', SCHEMA)  # format checking is on
    assert (parsed, valid) == (True, False) and "format" in why
    parsed, valid, why = check_output('{"n": 1', SCHEMA)
    assert (parsed, valid) == (False, False) and why.startswith("not JSON")
    assert check_output(None, SCHEMA)[:2] == (False, False)


def test_check_output_never_counts_an_unvalidatable_schema_as_valid() -> None:
    parsed, valid, why = check_output('{"a": 1}', {"$ref": "https://example.invalid/nowhere.json"})
    assert parsed and not valid and why.startswith("could not validate")


def test_percentile_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([0.3], 95) == 0.3
    vals = [float(i) for i in range(1, 21)]  # 1..20
    assert percentile(vals, 50) == 10.0
    assert percentile(vals, 95) == 19.0
    assert percentile(list(reversed(vals)), 100) == 20.0


def _acc(sub: str, finish: str, valid: bool | None, *, secs: float | None = 0.1, cached: bool = False,
         matcher: dict | None = None, check_ok: bool | None = True) -> SchemaResult:
    return SchemaResult(sub, "x.json", "accepted", finish_reason=finish, parsed=None if valid is None else True,
                        valid=valid, compile_seconds=secs, compile_cached=cached, check_strict_ok=check_ok,
                        matcher=matcher, why_invalid=None if valid in (None, True) else "minimum at /n: -1 < 0")


def _m(loose: int = 0, strict: int = 0, order: int = 0) -> dict:
    return {"compiled": True, "error": "", "valid": 3, "invalid": 4, "too_strict": strict, "order_only": order,
            "too_loose": loose, "label_fixes": 0}


def test_summarize_counts_coverage_compliance_length_errors_and_matcher() -> None:
    results = [
        _acc("A", "stop", True, secs=0.1, matcher=_m()),
        _acc("A", "stop", False, secs=0.3, matcher=_m(strict=1, order=2)),
        _acc("A", "length", None, secs=0.2, matcher=_m(loose=1)),
        SchemaResult("A", "r1.json", "rejected", http_status=400, error_code="unsupported_schema",
                     reject_keywords=["uniqueItems", "format"], compile_seconds=0.5, check_strict_ok=False),
        SchemaResult("A", "r2.json", "rejected", http_status=400, error_code="unsupported_schema",
                     reject_keywords=["uniqueItems"], check_strict_ok=True),  # endpoint said ok, chat refused
        SchemaResult("A", "e.json", "error", http_status=400, error_code="context_length_exceeded"),
        _acc("B", "stop", True, secs=0.05, cached=True),
    ]
    s = summarize(results)
    a = s["A"]
    assert (a["schemas"], a["accepted"], a["rejected_400"], a["other_errors"]) == (6, 3, 2, 1)
    assert a["declared_coverage"] == pytest.approx(3 / 5)  # errors are neither accepted nor refused
    assert (a["finished"], a["length"], a["valid_outputs"]) == (2, 1, 1)
    assert a["compliance"] == pytest.approx(0.5)
    assert a["top_reject_reasons"] == {"uniqueItems": 2, "format": 1}
    assert a["error_kinds"] == {"context_length_exceeded": 1}
    assert a["compile_basis"] == "cold" and a["compile_cold"] == 4
    assert a["compile_p50"] == 0.2 and a["compile_p95"] == 0.5
    assert a["check_disagrees"] == 1
    assert (a["matcher_schemas"], a["too_loose"], a["too_strict"], a["order_only"]) == (3, 1, 1, 2)
    assert a["invalid_examples"] == ["x.json: minimum at /n: -1 < 0"]
    b = s["B"]
    assert b["compile_basis"] == "cached" and b["compile_p50"] == 0.05 and b["compliance"] == 1.0
    assert s["all"]["schemas"] == 7 and s["all"]["accepted"] == 4


def test_summarize_without_finished_outputs_gives_no_rate() -> None:
    s = summarize([SchemaResult("A", "r.json", "rejected", http_status=400, reject_keywords=["not"])])
    assert "all" not in s
    assert s["A"]["compliance"] is None and s["A"]["declared_coverage"] == 0.0
    assert s["A"]["compile_p50"] is None and s["A"]["compile_basis"] == "n/a"


def test_markdown_report_prints_paper_columns_as_na_when_unknown() -> None:
    s = summarize([_acc("Github_easy", "stop", True, matcher=_m()),
                   SchemaResult("Github_easy", "r.json", "rejected", http_status=400, reject_keywords=["oneOf"])])
    md = markdown_report(s, {"model": "m", "strict": "true", "base_url": "u", "limit": 2, "max_tokens": 8, "seconds": 1})
    row = next(line for line in md.splitlines() if line.startswith("| Github_easy | 2 "))
    assert "| 50.0% |" in row and "100.0% (1/1)" in row
    if PAPER_COVERAGE["Github_easy"]["XGrammar"] is None:
        assert "| n/a | n/a |" in row
    assert "`oneOf` 1" in md
    assert "failed validation" not in md  # nothing to list when every finished output validated


def test_load_subset_is_sorted_and_limited(tmp_path: Path) -> None:
    sub = tmp_path / "Mini"
    sub.mkdir()
    for name in ("b", "a", "c"):
        (sub / f"{name}.json").write_text(json.dumps({"schema": {"type": "integer"}, "tests": [{"valid": True, "data": 1}]}))
    items = load_subset(tmp_path, "Mini", limit=2)
    assert [i.name for i in items] == ["a.json", "b.json"]
    assert items[0].tests == ((True, 1),) and items[0].schema == {"type": "integer"}
    with pytest.raises(SystemExit, match="no subset folder"):
        load_subset(tmp_path, "Missing")


def test_matcher_counts_finds_a_loose_keyword_and_a_clean_schema() -> None:
    loose = BenchItem("T", "u.json", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
                      ((True, [1, 2]), (False, [1, 1])))
    m = matcher_counts(loose)
    assert m["compiled"] and m["too_loose"] == 1 and m["too_strict"] == 0
    clean = BenchItem("T", "c.json", {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                                      "additionalProperties": False},
                      ((True, {"a": 1}), (False, {"a": "x"}), (False, {})))
    m = matcher_counts(clean)
    assert (m["too_loose"], m["too_strict"], m["valid"], m["invalid"]) == (0, 0, 1, 2)
