"""Every way a request can be wrong gets the OpenAI envelope, the right status and param.

The envelope is exactly ``{"error": {"message", "type", "param", "code"}}`` (the OpenAI
SDK builds its exception classes from it). Requests go through the whole app with the
FakeEngine, so these also prove that nothing reaches the engine when a request is refused.
"""
from __future__ import annotations

from typing import Any

import pytest

from server.errors import APIError, bad_request, error_body, validation_error

CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "Hi"}]
TOOL_W = {"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}


def _error(r: Any, status: int, *, param: Any = ..., code: Any = ..., type: str = "invalid_request_error") -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert err["type"] == type
    if param is not ...:
        assert err["param"] == param, err
    if code is not ...:
        assert err["code"] == code, err
    return err


@pytest.fixture
def app(make_app):
    return make_app()


@pytest.fixture
def client(app):
    return app.client()


# --------------------------------------------------------------------------- body


@pytest.mark.parametrize("content", [b"{bad", b"{\"messages\": [", b"\xff\xfe", b"nul"])
def test_malformed_json(client, app, content):
    err = _error(client.post(CHAT, content=content, headers={"content-type": "application/json"}), 400,
                 code="invalid_json")
    assert "JSON" in err["message"]
    assert app.engine.requests == []


@pytest.mark.parametrize("content", [b"", b"  \n"])
def test_empty_body(client, content):
    _error(client.post(CHAT, content=content), 400, code="invalid_json")


@pytest.mark.parametrize("payload", [[1, 2], "text", 3, None])
def test_body_not_an_object(client, payload):
    err = _error(client.post(CHAT, json=payload), 400, code="invalid_json")
    assert "object" in err["message"]


def test_missing_messages(client):
    err = _error(client.post(CHAT, json={"model": "fake-model"}), 400, param="messages",
                 code="missing_required_parameter")
    assert "messages" in err["message"]


def test_empty_messages(client):
    _error(client.post(CHAT, json={"messages": []}), 400, param="messages", code="invalid_value")


def test_messages_not_a_list(client):
    _error(client.post(CHAT, json={"messages": "hi"}), 400, param="messages")


def test_tool_message_without_tool_call_id(client):
    err = _error(client.post(CHAT, json={"messages": [*USER, {"role": "tool", "content": "x"}]}), 400,
                 param="messages[1]")
    assert "tool_call_id" in err["message"]


def test_unknown_role(client):
    _error(client.post(CHAT, json={"messages": [{"role": "robot", "content": "x"}]}), 400,
           param="messages[0].role")


def test_user_message_without_content(client):
    err = _error(client.post(CHAT, json={"messages": [{"role": "user"}]}), 400, param="messages[0]")
    assert "content" in err["message"]


def test_image_part_refused(client):
    msg = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}
    err = _error(client.post(CHAT, json={"messages": [msg]}), 400, param="messages[0]")
    assert "image_url" in err["message"]


def test_unknown_fields_ignored(client):
    assert client.post(CHAT, json={"messages": USER, "max_tokens": 3, "vendor_extra": {"x": 1}}).status_code == 200


# --------------------------------------------------------------------------- model and sampling


def test_unknown_model(client, app):
    err = _error(client.post(CHAT, json={"messages": USER, "model": "gpt-4"}), 404, param="model",
                 code="model_not_found")
    assert "gpt-4" in err["message"] and "fake-model" in err["message"]
    _error(client.post("/v1/completions", json={"prompt": "x", "model": "gpt-4"}), 404, code="model_not_found")
    assert app.engine.requests == []


@pytest.mark.parametrize("field, value", [
    ("temperature", 3), ("temperature", -0.1), ("temperature", "hot"), ("top_p", 0), ("top_p", 1.5),
    ("n", 0), ("n", 17), ("presence_penalty", 5), ("frequency_penalty", -3), ("max_tokens", 0),
    ("max_completion_tokens", 0), ("top_logprobs", 21),
])
def test_out_of_range(client, app, field, value):
    body = {"messages": USER, field: value}
    if field == "top_logprobs":
        body["logprobs"] = True
    err = _error(client.post(CHAT, json=body), 400, param=field, code="invalid_value")
    assert field in err["message"]
    assert app.engine.requests == []


def test_more_than_four_stops(client):
    err = _error(client.post(CHAT, json={"messages": USER, "stop": ["a", "b", "c", "d", "e"]}), 400, param="stop")
    assert "4" in err["message"]


def test_empty_stop_string(client):
    _error(client.post(CHAT, json={"messages": USER, "stop": ["a", ""]}), 400, param="stop")


def test_top_logprobs_without_logprobs_is_400(client):
    err = _error(client.post(CHAT, json={"messages": USER, "top_logprobs": 2}), 400)
    assert "logprobs" in err["message"]


def test_top_logprobs_without_logprobs_names_param(client):
    _error(client.post(CHAT, json={"messages": USER, "top_logprobs": 2}), 400, param="top_logprobs")


# --------------------------------------------------------------------------- context


def test_context_too_long(make_app):
    b = make_app(max_model_len=50)
    err = _error(_post(b, {"messages": USER}), 400, param="messages", code="context_length_exceeded")
    assert "50" in err["message"]
    assert b.engine.requests == []


def test_max_tokens_too_large_for_context(make_app):
    b = make_app(max_model_len=1000)
    err = _error(_post(b, {"messages": USER, "max_tokens": 990}), 400, param="max_tokens",
                 code="context_length_exceeded")
    assert "1000" in err["message"]
    assert _post(b, {"messages": USER, "max_tokens": 5}).status_code == 200


def test_max_completion_tokens_too_large_is_400(make_app):
    b = make_app(max_model_len=1000)
    _error(_post(b, {"messages": USER, "max_completion_tokens": 990}), 400, code="context_length_exceeded")


def test_max_completion_tokens_too_large_names_it(make_app):
    b = make_app(max_model_len=1000)
    _error(_post(b, {"messages": USER, "max_completion_tokens": 990}), 400, param="max_completion_tokens",
           code="context_length_exceeded")


def test_completion_prompt_too_long_is_400(make_app):
    b = make_app(max_model_len=50)
    _error(b.client().post("/v1/completions", json={"prompt": "x" * 60}), 400, code="context_length_exceeded")
    _error(b.client().post("/v1/completions", json={"prompt": "x" * 40, "max_tokens": 20}), 400,
           param="max_tokens", code="context_length_exceeded")


def test_completion_prompt_too_long_names_prompt(make_app):
    b = make_app(max_model_len=50)
    err = _error(b.client().post("/v1/completions", json={"prompt": "x" * 60}), 400, param="prompt",
                 code="context_length_exceeded")
    assert "messages" not in err["message"]


def _post(b: Any, body: dict) -> Any:
    return b.client().post(CHAT, json=body)


# --------------------------------------------------------------------------- tools


def test_tool_choice_without_tools(client):
    for choice in ("auto", "required", {"type": "function", "function": {"name": "w"}}):
        _error(client.post(CHAT, json={"messages": USER, "tool_choice": choice}), 400, param="tool_choice")


def test_tool_choice_none_without_tools_ok(client):
    assert client.post(CHAT, json={"messages": USER, "tool_choice": "none", "max_tokens": 3}).status_code == 200


def test_named_tool_choice_unknown_tool(client, app):
    body = {"messages": USER, "tools": [TOOL_W], "tool_choice": {"type": "function", "function": {"name": "zzz"}}}
    err = _error(client.post(CHAT, json=body), 400, param="tool_choice")
    assert "zzz" in err["message"]
    assert app.engine.requests == []


def test_duplicate_tool_names_is_400(client):
    err = _error(client.post(CHAT, json={"messages": USER, "tools": [TOOL_W, TOOL_W]}), 400)
    assert "unique" in err["message"] and "w" in err["message"]


def test_duplicate_tool_names_names_tools(client):
    _error(client.post(CHAT, json={"messages": USER, "tools": [TOOL_W, TOOL_W]}), 400, param="tools")


def test_bad_tool_name(client):
    tools = [{"type": "function", "function": {"name": "has space"}}]
    _error(client.post(CHAT, json={"messages": USER, "tools": tools}), 400, param="tools[0].function.name")


def test_invalid_tool_parameters_schema(client):
    tools = [{"type": "function", "function": {"name": "t", "parameters": {"type": 12}}}]
    err = _error(client.post(CHAT, json={"messages": USER, "tools": tools}), 400)
    assert err["param"] and err["param"].startswith("tools")


def test_tools_without_parser(make_app):
    b = make_app(tool_parser=None)
    _error(b.client().post(CHAT, json={"messages": USER, "tools": [TOOL_W]}), 400, param="tools",
           code="tools_unsupported")
    # tool_choice none never renders tools, so it needs no parser
    assert b.client().post(CHAT, json={"messages": USER, "tools": [TOOL_W], "tool_choice": "none",
                                       "max_tokens": 3}).status_code == 200


# --------------------------------------------------------------------------- structured output


def _rf(schema: Any, *, strict: bool | None = None) -> dict:
    js: dict[str, Any] = {"name": "out", "schema": schema}
    if strict is not None:
        js["strict"] = strict
    return {"type": "json_schema", "json_schema": js}


def test_invalid_json_schema(client, app):
    err = _error(client.post(CHAT, json={"messages": USER, "response_format": _rf({"type": 12})}), 400,
                 code="invalid_schema")
    assert err["param"].startswith("response_format")
    assert "/type" in err["message"]
    assert app.engine.requests == []


def test_json_schema_without_schema(client):
    body = {"messages": USER, "response_format": {"type": "json_schema"}}
    _error(client.post(CHAT, json=body), 400, param="response_format")


def test_unknown_response_format_type(client):
    body = {"messages": USER, "response_format": {"type": "xml"}}
    _error(client.post(CHAT, json=body), 400, param="response_format.type")


def test_strict_schema_unique_items(client):
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                                        "uniqueItems": True}}}
    err = _error(client.post(CHAT, json={"messages": USER, "response_format": _rf(schema, strict=True)}), 400,
                 code="unsupported_schema")
    assert err["param"].startswith("response_format")
    assert "uniqueItems" in err["message"] and "/properties/tags" in err["message"]


def test_non_strict_unique_items_is_served(client):
    schema = {"type": "array", "uniqueItems": True}
    r = client.post(CHAT, json={"messages": USER, "max_tokens": 5, "response_format": _rf(schema, strict=False)})
    assert r.status_code == 200


def test_structured_outputs_json_is_strict(client):
    body = {"messages": USER, "structured_outputs": {"json": {"type": "array", "uniqueItems": True}}}
    err = _error(client.post(CHAT, json=body), 400, param="structured_outputs.json", code="unsupported_schema")
    assert "uniqueItems" in err["message"]


def test_bad_regex(client, app):
    err = _error(client.post(CHAT, json={"messages": USER, "structured_outputs": {"regex": "a(b"}}), 400,
                 param="structured_outputs.regex", code="invalid_constraint")
    assert "regex" in err["message"]
    assert app.engine.requests == []


def test_bad_grammar(client):
    err = _error(client.post(CHAT, json={"messages": USER, "structured_outputs": {"grammar": "root ::= ("}}), 400,
                 param="structured_outputs.grammar", code="invalid_constraint")
    assert "grammar" in err["message"]


def test_two_structured_outputs_at_once(client):
    body = {"messages": USER, "structured_outputs": {"regex": "a", "choice": ["a"]}}
    _error(client.post(CHAT, json=body), 400, param="structured_outputs")


def test_schema_too_large(make_app):
    from server.config import Settings

    b = make_app(settings=Settings(max_schema_bytes=100))
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(20)}}
    _error(b.client().post(CHAT, json={"messages": USER, "response_format": _rf(schema)}), 400,
           code="schema_too_large")


def test_stream_request_errors_are_plain_json(client):
    """Validation happens before the stream starts: a 400 JSON body, not an SSE error event."""
    body = {"messages": USER, "stream": True, "structured_outputs": {"regex": "a(b"}}
    _error(client.post(CHAT, json=body), 400, code="invalid_constraint")


def test_chat_template_kwargs_may_not_override(client):
    body = {"messages": USER, "chat_template_kwargs": {"messages": []}}
    _error(client.post(CHAT, json=body), 400, param="chat_template_kwargs")


# --------------------------------------------------------------------------- completions


@pytest.mark.parametrize("body, param", [({}, "prompt"), ({"prompt": ""}, "prompt"), ({"prompt": []}, "prompt"),
                                         ({"prompt": "x", "logprobs": 6}, "logprobs")])
def test_completion_validation(client, body, param):
    _error(client.post("/v1/completions", json=body), 400, param=param)


# --------------------------------------------------------------------------- routes


def test_unknown_route(client):
    err = _error(client.get("/v1/nothing-here"), 404, code="not_found")
    assert err["message"]
    _error(client.post("/v2/chat/completions", json={}), 404)


def test_wrong_method(client):
    r = client.get(CHAT)
    _error(r, 405, code="method_not_allowed")
    assert r.headers["allow"] == "POST"
    _error(client.post("/v1/models"), 405, code="method_not_allowed")


def test_unexpected_exception_is_500_envelope(make_app):
    def script(req):
        raise RuntimeError("boom inside the engine")

    b = make_app(script=script)
    err = _error(b.client().post(CHAT, json={"messages": USER}), 500, type="server_error", code="internal_error")
    assert "boom" not in err["message"]  # internals are not leaked
    assert b.engine.aborted == [b.engine.requests[-1].request_id]
    assert b.state.in_flight == 0


def test_unexpected_exception_500_keeps_request_id(make_app):
    def script(req):
        raise RuntimeError("boom")

    r = make_app(script=script).client().post(CHAT, json={"messages": USER}, headers={"X-Request-Id": "r-500"})
    assert r.status_code == 500
    assert r.headers.get("x-request-id") == "r-500"


# --------------------------------------------------------------------------- the error helpers


def test_error_body_shape():
    assert error_body("m", type="t") == {"error": {"message": "m", "type": "t", "param": None, "code": None}}


def test_api_error_response():
    exc = APIError("nope", code="too_many_requests", headers={"Retry-After": "2"})
    resp = exc.response()
    assert resp.status_code == 429 and resp.headers["retry-after"] == "2"
    assert exc.body()["error"] == {"message": "nope", "type": "rate_limit_error", "param": None,
                                   "code": "too_many_requests"}
    br = bad_request("bad", param="p", code="invalid_value")
    assert (br.status, br.type, br.param, br.code) == (400, "invalid_request_error", "p", "invalid_value")


def test_validation_error_mapping():
    missing = validation_error([{"type": "missing", "loc": ("body", "messages"), "msg": "Field required"}])
    assert (missing.param, missing.code) == ("messages", "missing_required_parameter")
    nested = validation_error([{"type": "value_error", "loc": ("messages", 2, "content"),
                                "msg": "Value error, bad thing"}])
    assert nested.param == "messages[2].content"
    assert nested.message == "Invalid value for 'messages[2].content': bad thing."
    bare = validation_error([{"type": "value_error", "loc": (), "msg": "whole thing"}])
    assert bare.param is None and "whole thing" in bare.message
    assert validation_error([]).status == 400
    assert validation_error([{"type": "json_invalid", "loc": ("body", 1), "msg": "x",
                              "ctx": {"error": "Expecting value"}}]).code == "invalid_json"


def test_large_minimums_are_refused_before_they_reach_the_grammar(client):
    """minLength/minItems above --max-schema-min-length: the matcher's memory would grow per token."""
    big = {"type": "object", "properties": {"text": {"type": "string", "minLength": 20000}}, "required": ["text"]}
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": big}}})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "schema_too_large" and "minLength 20000" in err["message"]
    assert err["param"] == "response_format.json_schema.schema"
    items = {"type": "object", "properties": {"a": {"type": "array", "minItems": 5000}}}
    tool = {"type": "function", "function": {"name": "f", "parameters": items}}
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "tools": [tool]})
    assert r.status_code == 400 and "minItems 5000" in r.json()["error"]["message"]
    ok = {"type": "object", "properties": {"t": {"type": "string", "minLength": 1000, "examples": [{"minLength": 9999}]}}}
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 5,
                                                  "response_format": {"type": "json_schema",
                                                                      "json_schema": {"name": "x", "schema": ok}}})
    assert r.status_code == 200, r.text


# --------------------------------------------------------------------------- the catalog


def _readme_error_table() -> dict[str, int]:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, int] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].isdigit():
            for code in re.findall(r"`([a-z_]+)`", cells[1]):
                rows[code] = int(cells[0])
    return rows


def test_readme_error_table_is_the_catalog():
    from server.errors import CATALOG

    assert _readme_error_table() == {code: kind.status for code, kind in CATALOG.items()}


def test_every_code_the_server_raises_is_catalogued():
    """Codes are only ever written as ``code="..."``; each one must be in the catalog."""
    import re
    from pathlib import Path

    from server.errors import CATALOG

    server = Path(__file__).resolve().parents[2] / "server"
    used = {m for p in server.rglob("*.py") for m in re.findall(r'\bcode="([a-z_]+)"', p.read_text())}
    assert used and used <= set(CATALOG), used - set(CATALOG)


def test_status_and_type_come_from_the_code():
    e = APIError("busy", code="too_many_requests", headers={"Retry-After": "1"})
    assert (e.status, e.type, e.param) == (429, "rate_limit_error", None)
    assert APIError("x", code="model_not_found").param == "model"  # the catalog's default param
    with pytest.raises(KeyError):
        APIError("x", code="not_a_code")


def test_domain_errors_carry_code_and_param():
    from server.chat.render import RenderError
    from server.structured.constraints import ConstraintError, check_schema

    assert (ConstraintError("bad", "tool_choice").code, ConstraintError("bad", "tool_choice").param) == (
        "invalid_constraint", "tool_choice")
    with pytest.raises(ConstraintError) as exc:
        check_schema({"type": 12}, "tools[0].function.parameters")
    assert (exc.value.code, exc.value.status, exc.value.param) == ("invalid_schema", 400, "tools[0].function.parameters")
    r = RenderError("no")
    assert (r.code, r.param, r.status) == ("invalid_value", "messages", 400)
