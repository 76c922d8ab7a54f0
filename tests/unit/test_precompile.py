"""``--precompile``: schemas and tool sets are compiled (and cached) before serving."""
from __future__ import annotations

import json

import pytest

from server.structured.precompile import precompile_file, precompile_items

GOOD_SCHEMA = {"type": "object", "title": "T", "properties": {"a": {"type": "string"}}, "required": ["a"]}
TOOLS = {"tools": [{"type": "function", "function": {"name": "f", "parameters": GOOD_SCHEMA}}],
         "tool_choice": "required"}


def test_items_compile_into_the_cache(make_app):
    built = make_app()
    cache = built.state.grammar_cache
    errors = precompile_items(built.state, [GOOD_SCHEMA, TOOLS, {"response_format": {"type": "json_object"}}])
    assert errors == []
    # the same schema, asked for by a request afterwards, is a cache hit (on the backend it was given)
    from server.structured.from_request import build
    from server.structured.spec import ConstraintSpec

    c = build(ConstraintSpec(response_format={"type": "json_schema", "json_schema": {"schema": GOOD_SCHEMA}})).constraint
    assert c is not None and c.backend == "llguidance"  # open to other properties: llguidance writes them all
    assert cache.compile(c).cached is True


def test_bad_items_are_reported_with_their_index(make_app):
    built = make_app()
    errors = precompile_items(built.state, [GOOD_SCHEMA, {"type": "object", "properties": {"a": {"type": "nope"}}}])
    assert len(errors) == 1 and errors[0].startswith("item 1:")


def test_file_must_hold_a_list(make_app, tmp_path):
    built = make_app()
    f = tmp_path / "pre.json"
    f.write_text(json.dumps({"not": "a list"}))
    with pytest.raises(SystemExit, match="JSON list"):
        precompile_file(built.state, f)
    f.write_text(json.dumps([GOOD_SCHEMA]))
    precompile_file(built.state, f)  # logs, does not raise


# ---- one path: what is precompiled or diagnosed is what a request compiles

PRESCREENED = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}, "required": ["n"]}


def _request_hits(built, body) -> bool:
    """Whether a request with ``body`` finds its constraint already compiled."""
    from server.protocol import ChatCompletionRequest
    from server.structured.from_request import build, capabilities
    from server.structured.spec import constraint_spec

    req = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "x"}], **body})
    constraint = build(constraint_spec(req, capabilities(built.state))).constraint
    return built.state.grammar_cache.compile(constraint).cached


@pytest.mark.parametrize("reasoning", [None, "qwen3"])
def test_precompile_warms_the_keys_requests_use(make_app, reasoning):
    built = make_app(reasoning_parser=reasoning)
    schema = {"type": "object", "properties": {f"z_{reasoning}": {"type": "string"}}}
    assert precompile_items(built.state, [schema, PRESCREENED, TOOLS]) == []
    assert _request_hits(built, {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}})
    assert _request_hits(built, {"response_format": {"type": "json_schema",
                                                     "json_schema": {"name": "b", "schema": PRESCREENED}}})
    assert _request_hits(built, TOOLS)


@pytest.mark.parametrize("reasoning", [None, "qwen3"])
def test_schema_check_compiles_what_a_request_compiles(make_app, reasoning):
    built = make_app(reasoning_parser=reasoning)
    # vLLM pre-screens it (multipleOf): a structural tag; a name of its own keeps it unseen
    schema = {**PRESCREENED, "properties": {f"check_{reasoning}": PRESCREENED["properties"]["n"]}}
    r = built.client().post("/v1/schemas/check", json=schema)
    assert r.status_code == 200 and r.json()["items"][0]["compiles"] and not r.json()["items"][0]["cached"]
    assert _request_hits(built, {"response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}})


def test_schema_check_reports_an_invalid_schema_in_the_item(make_app):
    r = make_app().client().post("/v1/schemas/check", json={"type": "object", "properties": {"a": {"type": "nope"}}})
    item = r.json()["items"][0]
    assert r.status_code == 200 and item["compiles"] is False and "nope" in item["error"]
