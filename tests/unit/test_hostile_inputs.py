"""Hostile and careless input reaches a clear 4xx (never a 500, never the network or disk).

Front-end checks with the scripted engine; the same table runs against the real server in
``tests/reliability``.
"""
from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import Any

import pytest

from server.config import Settings
from server.structured.schema_refs import RefProblem, check_refs, local_validator

HI = [{"role": "user", "content": "hi"}]


def _chat(**kw: Any) -> dict[str, Any]:
    return {"model": "fake-model", "messages": HI, "max_tokens": 4, **kw}


def _err(r: Any, status: int = 400) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


# ------------------------------------------------------------------ values that used to reach a 500

@pytest.mark.parametrize("body,param", [
    (_chat(stop=""), "stop"),
    (_chat(seed=-1), "seed"),  # the fake engine refuses it: engine refusals are 400s naming the field
    (_chat(seed=-1, stream=True), "seed"),
    (_chat(stop=["a", ""]), "stop"),
    (_chat(seed=2**64), "seed"),
    (_chat(seed=-(2**63) - 1), "seed"),
    (_chat(messages=[{"role": "tool", "tool_call_id": "nope", "content": "x"}]), "messages"),
    (_chat(messages=[HI[0], {"role": "assistant", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_2", "content": "x"}]), "messages"),
])
def test_bad_values_are_400_naming_the_param(make_app: Any, body: dict[str, Any], param: str) -> None:
    err = _err(make_app().client().post("/v1/chat/completions", json=body))
    assert err["param"] == param, err


@pytest.mark.parametrize("raw", [
    '{"messages": [{"role": "user", "content": "\\ud800"}]}',
    '{"messages": [{"role": "user", "content": "x"}], "stop": "\\udfff"}',
    '{"messages": [{"role": "user", "content": "a\\uDC00b"}]}',
])
def test_lone_surrogates_are_400(make_app: Any, raw: str) -> None:
    err = _err(make_app().client().post("/v1/chat/completions", content=raw,
                                        headers={"content-type": "application/json"}))
    assert "surrogate" in err["message"]


def test_surrogate_pairs_are_text(make_app: Any) -> None:
    raw = '{"messages": [{"role": "user", "content": "\\ud83d\\ude00"}], "max_tokens": 3}'
    r = make_app().client().post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/schemas/check"])
def test_deeply_nested_json_is_400(make_app: Any, path: str) -> None:
    deep = '{"a":' * 5000 + "1" + "}" * 5000
    err = _err(make_app().client().post(path, content=deep, headers={"content-type": "application/json"}))
    assert "nested" in err["message"]


def test_deep_schema_in_check_endpoint_is_400(make_app: Any) -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(200):
        schema = {"type": "array", "items": schema}
    err = _err(make_app().client().post("/v1/schemas/check", json=schema))
    assert err["code"] == "schema_too_deep"


def test_schema_check_has_the_size_cap(make_app: Any) -> None:
    app = make_app(settings=Settings(max_schema_bytes=1000))
    big = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(200)}}
    assert _err(app.client().post("/v1/schemas/check", json=big))["code"] == "schema_too_large"


@pytest.mark.parametrize("so,code", [
    ({"choice": [f"c{i}" for i in range(50_000)]}, "schema_too_large"),
    ({"choice": ["x" * 600, "y" * 600]}, "schema_too_large"),
    ({"regex": "a" * 2000}, "schema_too_large"),
    ({"grammar": 'root ::= "' + "a" * 2000 + '"'}, "schema_too_large"),
])
def test_constraint_size_caps(make_app: Any, so: dict[str, Any], code: str) -> None:
    app = make_app(settings=Settings(max_schema_bytes=1000))
    err = _err(app.client().post("/v1/chat/completions", json=_chat(structured_outputs=so)))
    assert err["code"] == code and err["param"].startswith("structured_outputs"), err


@pytest.mark.parametrize("prompt", [[1, 2, -1], [1, 0x110000 + 5], ["ok", ""]])
def test_completion_prompts_out_of_range_are_400(make_app: Any, prompt: list[Any]) -> None:
    r = make_app().client().post("/v1/completions", json={"prompt": prompt, "max_tokens": 2})
    assert _err(r)["param"] == "prompt"


def test_completion_suffix_is_refused_not_ignored(make_app: Any) -> None:
    r = make_app().client().post("/v1/completions", json={"prompt": "def f(", "suffix": "return 1", "max_tokens": 2})
    assert _err(r)["param"] == "suffix"


# ------------------------------------------------------------------ $ref: no network, no files, no loops

class Listener:
    """A local TCP listener that records every connection it receives."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._t.join()
        self.sock.close()


@pytest.fixture
def listener() -> Any:
    lst = Listener()
    yield lst
    lst.close()


def _remote_refs(port: int, tmp: Any) -> list[str]:
    secret = tmp / "secret.json"
    secret.write_text('{"type": "integer"}')
    return [f"http://127.0.0.1:{port}/s.json", f"http://127.0.0.1:{port}/s.json#/a", f"file://{secret}",
            str(secret), "s.json", f"//127.0.0.1:{port}/x"]


def test_no_ref_is_ever_fetched(make_app: Any, listener: Listener, tmp_path: Any) -> None:
    client = make_app().client()
    for ref in _remote_refs(listener.port, tmp_path):
        schema = {"type": "object", "properties": {"a": {"$ref": ref}}, "required": ["a"]}
        bodies = [
            ("/v1/chat/completions", _chat(response_format={"type": "json_schema",
                                                            "json_schema": {"name": "x", "schema": schema}})),
            ("/v1/chat/completions", _chat(response_format={"type": "json_schema",
                                                            "json_schema": {"name": "x", "schema": schema, "strict": True}})),
            ("/v1/chat/completions", _chat(tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}])),
            ("/v1/completions", {"prompt": "x", "max_tokens": 2, "structured_outputs": {"json": schema}}),
            ("/v1/schemas/check", schema),
        ]
        for path, body in bodies:
            err = _err(client.post(path, json=body))
            assert "$ref" in err["message"] and ref in err["message"], err
    assert listener.hits == 0


def test_validators_have_no_retrieval(listener: Listener) -> None:
    v = local_validator({"$ref": f"http://127.0.0.1:{listener.port}/s.json"})
    with pytest.raises(Exception, match="Unresolvable"):
        v.is_valid(1)
    assert listener.hits == 0


@pytest.mark.parametrize("schema", [
    {"$ref": "#"},
    {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {"allOf": [{"$ref": "#"}]},
    {"type": "object", "$ref": "#"},
])
def test_ref_loops_that_produce_nothing_are_refused(make_app: Any, schema: dict[str, Any]) -> None:
    with pytest.raises(RefProblem):
        check_refs(schema)
    for strict in (True, False):
        rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": strict}}
        err = _err(make_app().client().post("/v1/chat/completions", json=_chat(response_format=rf)))
        assert "loop" in err["message"] and err["param"].startswith("response_format")


@pytest.mark.parametrize("schema", [
    {"$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"},
    {"type": "array", "items": {"$ref": "#"}},
    {"$id": "https://example.com/root", "$defs": {"a": {"$id": "https://example.com/a", "type": "string"}},
     "properties": {"x": {"$ref": "https://example.com/a"}}},
    {"$defs": {"a": {"$anchor": "here", "type": "string"}}, "properties": {"x": {"$ref": "#here"}}},
])
def test_refs_inside_the_document_are_fine(schema: dict[str, Any]) -> None:
    check_refs(schema)


# ------------------------------------------------------------------ HTTP details

def test_head_health(make_app: Any) -> None:
    r = make_app().client().head("/health")
    assert r.status_code == 200 and r.content == b""


@pytest.mark.parametrize("given,echoed", [("abc-123", True), ("naïve-id", False), ("x" * 200, False), ("a\tb", False)])
def test_request_id_is_echoed_only_when_plain(make_app: Any, given: str, echoed: bool) -> None:
    r = make_app().client().get("/v1/models", headers={"x-request-id": given.encode("utf-8")})
    rid = r.headers["x-request-id"]
    assert (rid == given) is echoed and rid.isascii() and rid.isprintable()


def test_header_size_cap(make_app: Any) -> None:
    app = make_app(settings=Settings(max_header_bytes=2048))
    r = app.client().get("/v1/models", headers={"x-big": "a" * 4096})
    assert _err(r, 431)["code"] == "headers_too_large"


# ------------------------------------------------------------------ lost work

def test_non_streamed_request_is_aborted_when_its_client_leaves(make_app: Any) -> None:
    """The disconnect reaches the handler: the engine request is aborted and the slot freed."""
    built = make_app(script=lambda req: ["x"] * 400, delay=0.01)

    async def run() -> None:
        body = json.dumps(_chat(max_tokens=400)).encode()
        sent = {"body": False}
        gone = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if not sent["body"]:
                sent["body"] = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        messages: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            messages.append(message)

        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
                 "query_string": b"", "headers": [(b"content-type", b"application/json")], "http_version": "1.1",
                 "scheme": "http", "server": ("test", 80), "client": ("test", 1), "root_path": "", "app": built.app}
        task = asyncio.ensure_future(built.app(scope, receive, send))
        for _ in range(200):
            await asyncio.sleep(0.01)
            if built.state.running:
                break
        assert built.state.running and built.state.in_flight == 1
        gone.set()
        await asyncio.wait_for(task, 5)
        assert built.state.in_flight == 0 and not built.state.running
        assert len(built.engine.aborted) == 1
        assert messages[0]["status"] == 499

    asyncio.run(run())


def test_cut_stream_ends_with_error_event_and_done(make_app: Any) -> None:
    """What a stream still running at the drain limit receives (the runner aborts it with cut set)."""
    some_out = asyncio.Event()

    class Pieces(list):  # the engine's script: says when the tenth piece has gone out
        def __iter__(self) -> Any:
            for i, piece in enumerate(list.__iter__(self)):
                if i == 10:
                    some_out.set()
                yield piece

    built = make_app(script=lambda req: Pieces(["x"] * 400), delay=0.01)

    async def cut_when_running() -> None:
        await asyncio.wait_for(some_out.wait(), 30)  # some tokens out
        built.state.cut = True
        for rid in list(built.state.running):
            await built.engine.abort(rid)

    async def run() -> list[str]:
        cutter = asyncio.ensure_future(cut_when_running())
        async with built.async_client() as c:
            r = await c.post("/v1/chat/completions", json=_chat(max_tokens=400, stream=True))
        await cutter
        return [line for line in r.text.splitlines() if line]

    lines = asyncio.run(run())
    assert len(lines) > 3 and lines[-1] == "data: [DONE]"
    err = json.loads(lines[-2][6:])["error"]
    assert err["code"] == "server_shutdown" and err["type"] == "server_error"


@pytest.mark.parametrize("tools", [5, True, "x", {"a": 1}, [5], [{"type": "function"}]])
def test_schema_check_with_tools_of_the_wrong_shape_is_400(make_app: Any, tools: Any) -> None:
    err = _err(make_app().client().post("/v1/schemas/check", json={"tools": tools}))
    assert err["code"] == "invalid_value" and "tools" in err["message"]


@pytest.mark.parametrize("call_id", [[1, 2], {"a": 1}, 5, None, "never-called"])
def test_a_call_output_whose_call_id_is_no_earlier_calls_is_400(make_app: Any, call_id: Any) -> None:
    body = {"input": [{"type": "function_call_output", "call_id": call_id, "output": "x"}]}
    err = _err(make_app().client().post("/v1/responses", json=body))
    assert err["param"] == "input[0].call_id" and err["code"] == "invalid_value"
