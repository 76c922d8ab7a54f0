"""server/api/middleware.py and the process lifecycle over HTTP: auth, limits, drain, dead engine,
disconnects, request ids, CORS, metrics."""
from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from server import metrics
from server.config import Settings
from server.engine.fake import FakeEngine
from tests.unit._front import (
    CHAT, HELLO, USER, WEATHER_SCRIPT, WEATHER_TOOL, chat as _chat, events as _events, script as _script,
    stream_raw as _stream_raw,
)


# --------------------------------------------------------------------------- auth


@pytest.fixture
def keyed(make_app):
    return make_app(settings=Settings(api_keys=("k1", "k2")))


def test_auth_missing_key(keyed):
    r = _chat(keyed.client())
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert keyed.engine.requests == []


def test_auth_wrong_key(keyed):
    r = keyed.client().post(CHAT, json={"messages": USER}, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    r = keyed.client().post(CHAT, json={"messages": USER}, headers={"Authorization": "Bearer k1x"})
    assert r.status_code == 401


@pytest.mark.parametrize("headers", [{"Authorization": "Bearer k1"}, {"Authorization": "Bearer k2"},
                                     {"authorization": "bearer k2"}, {"X-Api-Key": "k1"}])
def test_auth_good_keys(keyed, headers):
    r = keyed.client().post(CHAT, json={"messages": USER, "max_tokens": 5}, headers=headers)
    assert r.status_code == 200


def test_auth_models_needs_key(keyed):
    assert keyed.client().get("/v1/models").status_code == 401
    assert keyed.client().get("/v1/models", headers={"Authorization": "Bearer k2"}).status_code == 200


def test_auth_health_and_metrics_open(keyed):
    c = keyed.client()
    assert c.get("/health").status_code == 200
    assert c.get("/metrics").status_code == 200


def test_auth_metrics_protected_when_asked(make_app):
    b = make_app(settings=Settings(api_keys=("k1",), metrics_require_auth=True))
    c = b.client()
    assert c.get("/metrics").status_code == 401
    assert c.get("/metrics", headers={"Authorization": "Bearer k1"}).status_code == 200
    assert c.get("/health").status_code == 200


# --------------------------------------------------------------------------- limits


def test_body_too_large_413(make_app):
    b = make_app(settings=Settings(max_request_bytes=200))
    r = _chat(b.client(), messages=[{"role": "user", "content": "x" * 500}])
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"
    assert b.engine.requests == []


def test_body_too_large_without_content_length_413(make_app):
    b = make_app(settings=Settings(max_request_bytes=200))
    payload = json.dumps({"messages": [{"role": "user", "content": "x" * 500}]}).encode()

    def chunks():
        yield payload[:100]
        yield payload[100:]

    r = b.client().post(CHAT, content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"
    assert b.engine.requests == []


def test_too_many_tools_400(make_app):
    b = make_app(settings=Settings(max_tools=2))
    tools = [{"type": "function", "function": {"name": f"t{i}"}} for i in range(3)]
    r = _chat(b.client(), tools=tools)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "tools" and err["code"] == "too_many_tools"


async def _in_flight(b, c):
    """Start a chat request and return its future once the server counts it in flight."""
    first = asyncio.ensure_future(c.post(CHAT, json={"messages": USER, "max_tokens": 50}))
    for _ in range(200):
        if b.state.in_flight:
            break
        await asyncio.sleep(0.005)
    assert b.state.in_flight == 1
    return first


def test_concurrency_cap_429(make_app):
    asyncio.run(_test_concurrency_cap_429(make_app))


async def _test_concurrency_cap_429(make_app):
    b = make_app(settings=Settings(max_concurrent_requests=1), delay=0.05)
    async with b.async_client() as c:
        first = await _in_flight(b, c)
        second = await c.post(CHAT, json={"messages": USER, "max_tokens": 50})
        assert second.status_code == 429
        assert second.headers["retry-after"] == "1"
        err = second.json()["error"]
        assert err["type"] == "rate_limit_error" and err["code"] == "too_many_requests"
        assert (await first).status_code == 200
        assert b.state.in_flight == 0
        # the slot was given back
        again = await c.post(CHAT, json={"messages": USER, "max_tokens": 5})
        assert again.status_code == 200


# --------------------------------------------------------------------------- draining, dead engine


def test_draining_503(make_app):
    b = make_app()
    b.state.draining = True
    c = b.client()
    r = _chat(c)
    assert r.status_code == 503
    assert r.json()["error"]["type"] == "server_error"
    assert r.headers.get("retry-after") == "1"
    r = c.post("/v1/completions", json={"prompt": "x"})
    assert r.status_code == 503
    assert c.get("/health").status_code == 503
    assert c.get("/health").json()["status"] == "draining"
    assert c.get("/v1/models").status_code == 200  # reads still work while draining
    assert b.engine.requests == []


def test_draining_lets_in_flight_finish(make_app):
    b = make_app(delay=0.02)

    async def run() -> None:
        async with b.async_client() as c:
            first = await _in_flight(b, c)
            b.state.draining = True
            refused = await c.post(CHAT, json={"messages": USER, "max_tokens": 50})
            assert refused.status_code == 503
            done = await first
            assert done.status_code == 200 and done.json()["choices"][0]["message"]["content"] == HELLO
            assert b.state.in_flight == 0

    asyncio.run(run())


def test_gauges_return_to_zero(make_app):
    b = make_app()
    c = b.client()
    running, waiting = metrics.RUNNING._value.get(), metrics.WAITING._value.get()
    _chat(c, max_tokens=3)
    _stream_raw(c, max_tokens=3)
    c.post("/v1/completions", json={"prompt": "x", "max_tokens": 3})
    _chat(c, messages=[])  # 400 before the engine
    b.engine.dead = True
    _chat(c)  # 503 from the engine
    assert (metrics.RUNNING._value.get(), metrics.WAITING._value.get()) == (running, waiting)
    assert b.state.in_flight == 0


def test_not_ready_health_503(make_app):
    b = make_app()
    b.state.ready = False
    assert b.client().get("/health").status_code == 503
    b.state.ready = True
    assert b.client().get("/health").json() == {"status": "ok"}


def test_engine_dead_non_stream(make_app):
    b = make_app()
    b.engine.dead = True
    c = b.client()
    r = _chat(c)
    assert r.status_code == 503
    err = r.json()["error"]
    assert err["code"] == "engine_dead" and err["type"] == "server_error"
    assert set(err) == {"message", "type", "param", "code"}
    assert b.state.engine_dead is True
    assert c.get("/health").status_code == 503
    assert _chat(c).status_code == 503  # refused up front from now on


class _DiesAfterFirst(list):
    """A script whose iteration kills the engine after the first piece."""

    def __init__(self, engine_ref: list[Any], pieces: list[str]) -> None:
        super().__init__(pieces)
        self.engine_ref = engine_ref

    def __iter__(self):
        for i, piece in enumerate(list.__iter__(self)):
            if i == 1:
                self.engine_ref[0].dead = True
            yield piece


def test_engine_dead_mid_stream(make_app):
    ref: list[Any] = []
    b = make_app(script=lambda req: _DiesAfterFirst(ref, ["Hello", " world", "!"]))
    ref.append(b.engine)
    c = b.client()
    raw = _stream_raw(c, max_tokens=50)
    events = _events(raw)
    assert events[-1] == "[DONE]"
    assert "error" in events[-2]
    assert events[-2]["error"]["code"] == "engine_dead"
    assert set(events[-2]["error"]) == {"message", "type", "param", "code"}
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(ch["delta"].get("content") or "" for ev in events[:-2] for ch in ev["choices"]) == "Hello"
    assert b.state.engine_dead is True
    assert c.get("/health").status_code == 503


class _RaisesAfterFirst(list):
    def __iter__(self):
        yield "Hel"
        raise RuntimeError("unexpected engine failure")


def test_unexpected_error_mid_stream_ends_with_error_and_done(make_app):
    b = make_app(script=lambda req: _RaisesAfterFirst(["a", "b", "c"]))  # len > 1: not the last piece
    before = metrics.CLIENT_DISCONNECTS._value.get()
    raw = _stream_raw(b.client(), max_tokens=50)
    events = _events(raw)
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["type"] == "server_error"
    assert metrics.CLIENT_DISCONNECTS._value.get() == before


def test_health_marks_engine_dead(make_app):
    b = make_app()
    b.engine.dead = True
    r = b.client().get("/health")
    assert r.status_code == 503 and b.state.engine_dead is True


# --------------------------------------------------------------------------- disconnect


def test_disconnect_aborts_engine_request(make_app):
    asyncio.run(_test_disconnect_aborts_engine_request(make_app))


async def _test_disconnect_aborts_engine_request(make_app):
    from server.plan import build_plan
    from server.chat.sse import each_event
    from server.plan.chat_frames import chat_stream
    from server.protocol import ChatCompletionRequest

    b = make_app(script=_script(["a", "b", "c", "d"]))
    req = ChatCompletionRequest.model_validate({"messages": USER, "stream": True, "max_tokens": 50})
    prepared = build_plan(b.state, req)
    before = metrics.CLIENT_DISCONNECTS._value.get()
    gen = each_event(chat_stream(b.state, prepared))
    first = await gen.__anext__()
    second = await gen.__anext__()
    # one write per engine chunk: the role and the first text go out together
    assert b"assistant" in first and b'"a"' in first and b'"b"' in second
    await gen.aclose()
    assert b.engine.aborted == [prepared.id]
    assert prepared.id == b.engine.requests[-1].request_id
    assert metrics.CLIENT_DISCONNECTS._value.get() == before + 1


def test_finished_stream_does_not_abort(make_app):
    asyncio.run(_test_finished_stream_does_not_abort(make_app))


async def _test_finished_stream_does_not_abort(make_app):
    from server.plan import build_plan
    from server.chat.sse import each_event
    from server.plan.chat_frames import chat_stream
    from server.protocol import ChatCompletionRequest

    b = make_app()
    req = ChatCompletionRequest.model_validate({"messages": USER, "stream": True, "max_tokens": 50})
    out = [x async for x in each_event(chat_stream(b.state, build_plan(b.state, req)))]
    assert out[-1].endswith(b"data: [DONE]\n\n")  # with the finish, in one write
    assert b.engine.aborted == []


def test_http_disconnect_mid_stream_aborts(make_app):
    """A real ASGI http.disconnect while the engine is generating reaches engine.abort."""
    b = make_app(script=_script(["x"] * 50), delay=0.01)
    asyncio.run(_disconnect_mid_stream(b))


class _AwaitingAbortEngine(FakeEngine):
    """Like the vLLM adapter, whose abort awaits ``AsyncLLM.abort`` (a suspension point)."""

    async def abort(self, request_id: str) -> None:
        await asyncio.sleep(0)
        self.aborted.append(request_id)


def test_http_disconnect_aborts_engine_whose_abort_awaits(make_app):
    b = make_app()
    b.engine = b.state.engine = _AwaitingAbortEngine(script=_script(["x"] * 50), delay=0.01)
    asyncio.run(_disconnect_mid_stream(b))


async def _disconnect_mid_stream(b: Any) -> None:
    body = json.dumps({"messages": USER, "stream": True, "max_tokens": 100}).encode()
    sent: list[dict[str, Any]] = []
    got_body = asyncio.Event()
    gone = asyncio.Event()
    first = True

    async def receive() -> dict[str, Any]:
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and b'"x"' in message.get("body", b""):
            got_body.set()

    # spec_version 2.3 is what uvicorn (h11 and httptools) declares
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": CHAT, "raw_path": CHAT.encode(), "query_string": b"",
             "root_path": "", "headers": [(b"content-type", b"application/json"),
                                          (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 1), "server": ("test", 80)}
    task = asyncio.ensure_future(b.app(scope, receive, send))
    await asyncio.wait_for(got_body.wait(), 5)
    gone.set()
    await asyncio.wait_for(task, 5)
    rid = b.engine.requests[-1].request_id
    assert b.engine.aborted == [rid]
    assert b.state.in_flight == 0
    assert sum(1 for m in sent if m["type"] == "http.response.body") < 50


def test_completion_stream_disconnect_aborts(make_app):
    from server.plan import build_plan
    from server.plan.completion_frames import completion_stream
    from server.protocol import CompletionRequest

    b = make_app(script=_script(["a", "b", "c", "d"]))

    async def run() -> None:
        req = CompletionRequest.model_validate({"prompt": "x", "stream": True, "max_tokens": 50})
        plan = build_plan(b.state, req)
        gen = completion_stream(b.state, plan)
        assert b'"a"' in await gen.__anext__()
        await gen.aclose()
        assert b.engine.aborted == [plan.id] == [b.engine.requests[-1].request_id]

    asyncio.run(run())


def test_cors_preflight_open_with_auth(make_app):
    b = make_app(settings=Settings(api_keys=("k",), cors_origins=("https://app.example",)))
    r = b.client().options(CHAT, headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                                          "Access-Control-Request-Headers": "authorization"})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "https://app.example"


# --------------------------------------------------------------------------- request id


def test_request_id_echoed(make_app):
    c = make_app().client()
    r = c.post(CHAT, json={"messages": USER, "max_tokens": 5}, headers={"X-Request-Id": "my-req-42"})
    assert r.headers["x-request-id"] == "my-req-42"
    r = c.get("/v1/models", headers={"X-Request-Id": "abc"})
    assert r.headers["x-request-id"] == "abc"


def test_request_id_generated(make_app):
    c = make_app().client()
    a = c.post(CHAT, json={"messages": USER, "max_tokens": 5}).headers["x-request-id"]
    bb = c.get("/health").headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", a) and re.fullmatch(r"[0-9a-f]{32}", bb) and a != bb


def test_request_id_on_errors(make_app):
    b = make_app(settings=Settings(api_keys=("k",)))
    r = b.client().post(CHAT, json={"messages": USER}, headers={"X-Request-Id": "rid-401"})
    assert r.status_code == 401 and r.headers["x-request-id"] == "rid-401"
    r = b.client().post(CHAT, content=b"{", headers={"X-Request-Id": "rid-400", "Authorization": "Bearer k"})
    assert r.status_code == 400 and r.headers["x-request-id"] == "rid-400"


def test_request_id_single_header_on_middleware_errors(make_app):
    b = make_app(settings=Settings(api_keys=("k",)))
    r = b.client().post(CHAT, json={"messages": USER}, headers={"X-Request-Id": "once"})
    assert r.headers.get_list("x-request-id") == ["once"]


# --------------------------------------------------------------------------- metrics


def test_metrics_exposes_every_name(make_app):
    b = make_app(script=_script(WEATHER_SCRIPT))
    c = b.client()
    assert _chat(c, tools=[WEATHER_TOOL], max_tokens=200).status_code == 200
    r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    declared = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")}
    samples = {re.split(r"[{ ]", ln, maxsplit=1)[0] for ln in text.splitlines() if ln and not ln.startswith("#")}
    for name in metrics.METRIC_NAMES:
        base = name.removesuffix("_total")
        assert name in declared or base in declared, f"{name} not declared"
        assert any(s == name or s.startswith(name + "_") or s.startswith(base + "_") for s in samples), \
            f"{name} has no samples"
    assert re.search(r'gramserve_requests_total\{endpoint="/v1/chat/completions",status="200"\} [1-9]', text)
    assert re.search(r'gramserve_tool_calls_total\{outcome="valid",parser="hermes"\} [1-9]', text)


def test_metrics_brings_the_engines_metrics_up_to_date_before_each_read(make_app):
    b = make_app()
    c = b.client()
    assert b.engine.metrics_flushes == 0
    c.get("/metrics")
    c.get("/metrics")
    assert b.engine.metrics_flushes == 2


def test_metrics_still_answers_when_the_engines_metrics_fail_to_record(make_app, monkeypatch, caplog):
    b = make_app()

    def broken() -> None:
        raise RuntimeError("stats of an unknown shape")

    monkeypatch.setattr(b.engine, "flush_metrics", broken)
    r = b.client().get("/metrics")
    assert r.status_code == 200
    assert re.search(r"^gramserve_requests_running \S+$", r.text, re.M)
    assert "could not be brought up to date" in caplog.text and "stats of an unknown shape" in caplog.text


def test_metrics_unknown_paths_bounded_label(make_app):
    c = make_app().client()
    c.get("/no/such/path/12345")
    text = c.get("/metrics").text
    assert "/no/such/path/12345" not in text
    assert 'endpoint="other",status="404"' in text


def test_one_access_line_per_request_with_its_fields(make_app, caplog: pytest.LogCaptureFixture) -> None:
    """The access line (written without logging's caller lookup) carries what an operator greps for,
    in the JSON format the server logs in."""
    import logging

    from server.logs import JsonFormatter

    built = make_app()
    with caplog.at_level(logging.INFO, logger="gramserve.access"):
        r = built.client().post("/v1/chat/completions", json={"messages": USER})
    lines = [rec for rec in caplog.records if rec.name == "gramserve.access" and rec.getMessage() == "request"]
    assert r.status_code == 200 and len(lines) == 1
    out = json.loads(JsonFormatter().format(lines[0]))
    assert out["request_id"] == r.headers["x-request-id"] and out["status"] == 200 and out["level"] == "info"
    assert (out["method"], out["path"]) == ("POST", "/v1/chat/completions") and out["duration_s"] >= 0
