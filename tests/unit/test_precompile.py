"""``--precompile``: schemas and tool sets are compiled (and cached) before serving."""
from __future__ import annotations

import json

import pytest

from server.precompile import precompile_file, precompile_items

GOOD_SCHEMA = {"type": "object", "title": "T", "properties": {"a": {"type": "string"}}, "required": ["a"]}
TOOLS = {"tools": [{"type": "function", "function": {"name": "f", "parameters": GOOD_SCHEMA}}],
         "tool_choice": "required"}


def test_items_compile_into_the_cache(make_app):
    built = make_app()
    cache = built.state.grammar_cache
    errors = precompile_items(built.state, [GOOD_SCHEMA, TOOLS, {"response_format": {"type": "json_object"}}])
    assert errors == []
    # the same schema, asked for by a request afterwards, is a cache hit
    from server.constraints import constraint_from_request
    from server.schema_support import normalize_schema

    schema = normalize_schema(GOOD_SCHEMA)  # what a request compiles
    c = constraint_from_request(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
                                structured_outputs=None, tools=None, tool_choice=None, parallel_tool_calls=True,
                                tool_format=None)
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
