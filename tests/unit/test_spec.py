"""server/structured/spec.py: one spec per body, whichever path builds it; the schema check and
``--precompile`` warm exactly the memo entry (and compiled grammar) the request then uses."""
from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from server.protocol import ChatCompletionRequest
from server.structured import from_request
from server.structured.precompile import item_request, precompile_items
from server.structured.schema_check import body_request, offline_capabilities
from server.structured.spec import Capabilities, Limits, constraint_spec
from tests.unit._front import CHAT, USER


def _schema() -> dict[str, Any]:  # a property of its own: never seen by the shared grammar cache
    return {"type": "object", "properties": {f"p_{uuid.uuid4().hex[:8]}": {"type": "integer"}}, "required": []}


def _tools() -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, f"u_{uuid.uuid4().hex[:8]}": {"type": "string"}},
        "required": ["city"]}}}]


def _request(**body: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": USER, **body})


def _builds(monkeypatch) -> list[Any]:
    """Every spec built (memo misses), in order."""
    seen: list[Any] = []
    real = from_request.build

    def counted(spec):
        seen.append(spec)
        return real(spec)

    monkeypatch.setattr(from_request, "build", counted)
    return seen


def _request_hits_the_warm_entry(b, builds: list[Any], body: dict[str, Any]) -> None:
    """A request with ``body`` builds nothing new and sends the remembered constraint object."""
    memo = b.state.constraint_memo
    before = len(builds)
    cached = len(b.state.grammar_cache)
    r = b.client().post(CHAT, json={"messages": USER, "max_tokens": 8, **body})
    assert r.status_code == 200, r.text
    assert len(builds) == before, "the request built its constraint again: the warm entry was another spec"
    sent = b.engine.requests[-1].constraint
    assert sent is not None and len(b.state.grammar_cache) == cached
    assert b.state.grammar_cache.compile(sent).cached
    assert any(v.constraint is sent for v in memo._items.values())


BODIES = {
    "schema": lambda: {"response_format": {"type": "json_schema", "json_schema": {"name": "city", "description": "A city",
                                                                                  "schema": _schema()}}},
    "tools": lambda: {"tools": _tools()},
}


def _warm_by_check(b, item: Any) -> None:
    r = b.client().post("/v1/schemas/check", json=item)
    assert r.status_code == 200 and r.json()["items"][0]["compiles"], r.text


def _warm_by_precompile(b, item: Any) -> None:
    assert precompile_items(b.state, [item]) == []


@pytest.mark.parametrize("reasoning", [None, "qwen3"])
@pytest.mark.parametrize("kind", sorted(BODIES))
@pytest.mark.parametrize("warm", [_warm_by_check, _warm_by_precompile], ids=["schema_check", "precompile"])
def test_warming_fills_the_entry_the_request_hits(make_app, monkeypatch, warm, kind, reasoning):
    """For the same body, the check / precompile builds one spec, and the request then builds
    nothing: it sends the very constraint object the warm-up remembered, already compiled."""
    b = make_app(reasoning_parser=reasoning)
    builds = _builds(monkeypatch)
    body = BODIES[kind]()
    warm(b, body["response_format"]["json_schema"]["schema"] if kind == "schema" else {"tools": body["tools"]})
    assert len(builds) == 1 and len(b.state.constraint_memo) == 1
    _request_hits_the_warm_entry(b, builds, body)


def test_schema_check_compiles_tools_as_the_tool_call_grammar(make_app):
    """Not each tool's parameters as a response format: the structural tag of the calls."""
    b = make_app()
    tools = _tools()
    assert b.client().post("/v1/schemas/check", json={"tools": tools}).status_code == 200
    (built,) = b.state.constraint_memo._items.values()
    assert built.constraint.kind == "structural_tag"


def test_offline_check_builds_the_spec_a_default_server_builds(make_app):
    b = make_app()  # default Settings, hermes, no reasoning parser: what check-schema assumes
    schema = _schema()
    as_request = _request(response_format={"type": "json_schema", "json_schema": {"name": "schema", "schema": schema}})
    assert constraint_spec(body_request(schema), offline_capabilities()).key() == \
        constraint_spec(as_request, from_request.capabilities(b.state)).key()
    tools = _tools()
    assert constraint_spec(body_request({"tools": tools}), offline_capabilities()).key() == \
        constraint_spec(_request(tools=tools), from_request.capabilities(b.state)).key()
    assert constraint_spec(item_request({"tools": tools}), offline_capabilities()).key() == \
        constraint_spec(_request(tools=tools), from_request.capabilities(b.state)).key()


def test_capabilities_are_made_once_per_settings_and_parsers(make_app):
    """One Capabilities per process (its parts then keep their identity for the spec's memo key),
    and a new one when a part changes; the key is the one the fields themselves give."""
    import dataclasses
    from dataclasses import asdict

    b = make_app()
    caps = from_request.capabilities(b.state)
    assert from_request.capabilities(b.state) is caps
    b.state.settings = dataclasses.replace(b.state.settings, tool_constraints=not b.state.settings.tool_constraints)
    changed = from_request.capabilities(b.state)
    assert changed is not caps and changed.tool_constraints != caps.tool_constraints
    spec = constraint_spec(_request(tools=_tools()), changed)
    by_fields = json.loads(spec.key())
    assert by_fields[3:6] == [asdict(spec.call_format), None if spec.reasoning is None else asdict(spec.reasoning),
                              asdict(spec.limits)]


def test_spec_keeps_only_what_the_grammar_depends_on():
    caps = Capabilities()
    tools = _tools()
    plain = constraint_spec(_request(tools=tools), caps)
    described = [{**t, "function": {**t["function"], "description": "another description"}} for t in tools]
    assert constraint_spec(_request(tools=described), caps).key() == plain.key()
    assert constraint_spec(_request(tools=tools, tool_choice="auto"), caps).key() == plain.key()
    assert constraint_spec(_request(tools=tools, tool_choice="required"), caps).key() != plain.key()
    assert constraint_spec(_request(tools=tools, tool_choice="none"), caps).tools is None
    reordered = [{**t, "function": {**t["function"], "parameters": {
        **t["function"]["parameters"], "properties": dict(reversed(t["function"]["parameters"]["properties"].items()))}}}
        for t in tools]
    assert constraint_spec(_request(tools=reordered), caps).key() != plain.key()  # property order is grammar
    schema = _schema()
    rf = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    assert constraint_spec(_request(response_format=rf), caps).key() == constraint_spec(_request(
        response_format={"type": "json_schema", "json_schema": {"name": "b", "description": "d", "schema": schema}}),
        caps).key()
    assert constraint_spec(_request(), Capabilities(limits=Limits(max_depth=3))).key() != \
        constraint_spec(_request(), caps).key()


def test_tool_spec_normalises_the_choice_shapes():
    tools = _tools() + [{"type": "function", "function": {"name": "get_time"}}]
    named = constraint_spec(_request(tools=tools, tool_choice={"type": "function", "function": {"name": "get_time"}}),
                            Capabilities()).tools
    assert named.mode == "named" and named.names == ("get_weather", "get_time")
    allowed = constraint_spec(_request(tools=tools, tool_choice={"type": "allowed_tools", "allowed_tools": {
        "mode": "required", "tools": [{"type": "function", "function": {"name": "get_time"}}]}}), Capabilities()).tools
    assert allowed.mode == "required" and allowed.names == ("get_time",)
    legacy = constraint_spec(ChatCompletionRequest.model_validate({
        "messages": USER, "functions": [{"name": "f", "parameters": {"type": "object"}}], "function_call": {"name": "f"}}),
        Capabilities()).tools
    assert legacy.legacy and legacy.mode == "named" and legacy.parallel is False


def test_depth_flag_cannot_exceed_the_grammar_limit():
    from server.config import MAX_SCHEMA_DEPTH, settings_from_args

    assert settings_from_args(["--max-schema-depth", "10"]).max_schema_depth == 10
    with pytest.raises(SystemExit):
        settings_from_args(["--max-schema-depth", str(MAX_SCHEMA_DEPTH + 1)])
