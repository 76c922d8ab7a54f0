"""The schema diagnostics report and the offline ``gramserve check-schema`` command."""
from __future__ import annotations

import json

import pytest
import xgrammar as xgr

from server.structured.grammar_cache import GrammarCache
from server.structured.schema_check import check_schema_report, split_body
from server.structured.schema_cli import check_schema_main

SCHEMA = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                                           "n": {"type": "integer"}}, "required": ["n"]}
EXACT = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}, "required": ["n"],
         "additionalProperties": False}


@pytest.fixture(scope="module")
def cache():
    return GrammarCache(xgr.TokenizerInfo([]), disable_any_whitespace=True)


def test_loose_keyword_is_named_with_pointer(cache):
    report = check_schema_report(SCHEMA, cache=cache)
    item = report["items"][0]
    assert item["compiles"] is True and item["strict_ok"] is False and report["ok"] is False
    assert any("uniqueItems" in p and "/properties/tags" in p for p in item["problems"])
    levels = {(k["pointer"], k["keyword"]): k["level"] for k in item["keywords"]}
    assert levels[("/properties/tags", "uniqueItems")] == "LOOSE"
    assert levels[("/properties/n", "type")] == "EXACT"


def test_exact_schema_ok_and_second_compile_cached(cache):
    first = check_schema_report({"schema": EXACT}, cache=cache)["items"][0]
    second = check_schema_report(EXACT, cache=cache)["items"][0]
    assert first["strict_ok"] and first["compile_seconds"] is not None
    assert second["cached"] is True


def test_tools_list_reports_each_tool(cache):
    tools = [{"type": "function", "function": {"name": "a", "parameters": EXACT}},
             {"type": "function", "function": {"name": "b"}}]
    report = check_schema_report({"tools": tools}, cache=cache)
    assert [i["name"] for i in report["items"]] == ["tools[0]:a", "tools[1]:b"]
    assert report["ok"] is True


def test_bad_bodies_raise_value_error():
    with pytest.raises(ValueError):
        split_body("just a string")
    with pytest.raises(ValueError, match="tools\\[0\\]"):
        split_body([{"type": "function"}])


def test_cli_exit_codes(tmp_path, capsys):
    loose = tmp_path / "loose.json"
    loose.write_text(json.dumps(SCHEMA))
    exact = tmp_path / "exact.json"
    exact.write_text(json.dumps(EXACT))
    assert check_schema_main([str(loose)]) == 1
    assert "uniqueItems at /properties/tags" in capsys.readouterr().out
    assert check_schema_main([str(exact), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


@pytest.mark.parametrize("body", [{"schema": True}, {"schema": False, "strict": True, "name": "n"}])
def test_a_boolean_schema_is_refused_as_the_request_refuses_it(cache, body):
    """``{"schema": true}`` is a response format's schema that is not an object (a request gets a 400),
    not a schema object with an unknown ``schema`` keyword (which is exact)."""
    from pydantic import ValidationError

    from server.protocol import ChatCompletionRequest

    with pytest.raises(ValidationError, match="response_format.json_schema.schema"):
        ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "-"}], "response_format": {
            "type": "json_schema", "json_schema": {"name": "n", **body}}})
    report = check_schema_report(body, cache=cache)
    item = report["items"][0]
    assert report["ok"] is False and item["strict_ok"] is False and item["compiles"] is False
    assert "response_format.json_schema.schema" in item["error"]


def test_a_bare_schema_may_carry_an_annotation_named_schema(cache):
    report = check_schema_report({**EXACT, "schema": "v1"}, cache=cache)
    assert report["ok"] is True and report["items"][0]["name"] == "schema"
