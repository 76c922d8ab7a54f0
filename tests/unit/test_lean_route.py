"""LeanRoute: the generation routes keep FastAPI's path, methods and OpenAPI entry without its
per-request machinery; LeanDispatch: a POST to one of them answers as through the full stack
(server/api/lean_route.py, server/api/app.py)."""
from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Router

from server.api.lean_route import LeanDispatch, LeanRoute
from server.config import Settings
from server.errors import APIError
from tests.unit._front import CHAT, USER, WEATHER_SCRIPT, WEATHER_TOOL, masked, script


def test_documented_and_served_like_any_route() -> None:
    router = APIRouter(route_class=LeanRoute)

    @router.post("/echo", openapi_extra={"requestBody": {"content": {"application/json": {"schema": {}}}}})
    async def echo(request: Request):
        return JSONResponse({"got": (await request.json())["x"]})

    app = FastAPI()
    app.include_router(router)
    client = TestClient(app)
    assert client.post("/echo", json={"x": 1}).json() == {"got": 1}
    assert client.get("/echo").status_code == 405  # the methods still hold
    assert "requestBody" in client.get("/openapi.json").json()["paths"]["/echo"]["post"]


def test_an_endpoint_with_parameters_is_refused() -> None:
    async def takes_an_id(item_id: str, request: Request):  # FastAPI would have to solve item_id
        return JSONResponse({})

    with pytest.raises(TypeError, match="only the Request"):
        LeanRoute("/items/{item_id}", takes_an_id, methods=["GET"])


def test_the_generation_routes_are_lean(make_app) -> None:
    app = make_app().app
    lean = {r.path for r in app.routes if isinstance(r, LeanRoute)}
    assert lean == {"/v1/chat/completions", "/v1/completions", "/v1/responses"}
    paths = app.openapi()["paths"]
    assert all("requestBody" in paths[p]["post"] for p in ("/v1/chat/completions", "/v1/completions"))


# --------------------------------------------------------------------------- LeanDispatch

_MASK = [(re.compile(r"(chatcmpl|cmpl|resp|msg|fc|call|rs)_?-?[0-9A-Za-z]{8,}"), "ID"),
         (re.compile(r'"(created|created_at)":\s?\d+(\.\d+)?'), '"created":0')]


def _boom(req: Any) -> list[str]:
    raise RuntimeError("the script failed")  # no handler takes it: the gateway's 500


_CASES: dict[str, tuple[str, Any, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"messages": USER}, {}),
    "chat stream": ("/v1/chat/completions", {"messages": USER, "stream": True,
                                             "stream_options": {"include_usage": True}}, {}),
    "chat tools": ("/v1/chat/completions", {"messages": USER, "tools": [WEATHER_TOOL], "tool_choice": "auto"},
                   {"script": script(WEATHER_SCRIPT)}),
    "completions": ("/v1/completions", {"prompt": "Hi", "max_tokens": 3}, {}),
    "completions stream": ("/v1/completions", {"prompt": "Hi", "stream": True}, {}),
    "responses": ("/v1/responses", {"input": "Hi"}, {}),
    "responses stream": ("/v1/responses", {"input": "Hi", "stream": True}, {}),
    "malformed JSON": ("/v1/chat/completions", b"{not json", {}),
    "not an object": ("/v1/chat/completions", [1, 2], {}),
    "validation error": ("/v1/chat/completions", {"messages": USER, "temperature": "hot"}, {}),
    "unknown field type": ("/v1/completions", {"prompt": 3.5}, {}),
    "bad tool_choice": ("/v1/chat/completions", {"messages": USER, "tool_choice": "required"}, {}),
    "engine refuses": ("/v1/chat/completions", {"messages": USER, "seed": -1}, {}),
    "script raises": ("/v1/chat/completions", {"messages": USER}, {"script": _boom}),
    "engine dead": ("/v1/chat/completions", {"messages": USER}, {"dead": True}),
    "no key": ("/v1/chat/completions", {"messages": USER}, {"settings": Settings(api_keys=("k",))}),
    "body too large": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 400}]},
                       {"settings": Settings(max_request_bytes=200)}),
    "CORS": ("/v1/chat/completions", {"messages": USER}, {"settings": Settings(cors_origins=("https://a.example",)),
                                                          "headers": {"Origin": "https://a.example"}}),
}


_STATUS = {"malformed JSON": 400, "not an object": 400, "validation error": 400, "unknown field type": 400,
           "bad tool_choice": 400, "engine refuses": 400, "script raises": 500, "engine dead": 503, "no key": 401,
           "body too large": 413}


def _answer(make_app: Any, path: str, body: Any, opts: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    opts = dict(opts)
    headers = {"X-Request-Id": "req-1", **opts.pop("headers", {})}
    dead = opts.pop("dead", False)
    built = make_app(**opts)
    built.engine.dead = dead
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with built.client().stream("POST", path, content=raw, headers={**headers, "Content-Type": "application/json"}) as r:
        text = "".join(r.iter_text())
    kept = {k: v for k, v in r.headers.items() if k != "content-length"}  # a masked body's length may differ
    return r.status_code, kept, masked(text, _MASK)


@pytest.mark.parametrize("name", list(_CASES))
def test_the_lean_dispatch_answers_as_the_full_stack(make_app: Any, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    path, body, opts = _CASES[name]
    lean = _answer(make_app, path, body, opts)
    monkeypatch.setattr(LeanDispatch, "takes", lambda self, scope: False)
    full = _answer(make_app, path, body, opts)
    assert lean == full
    assert lean[1]["x-request-id"] == "req-1"
    assert lean[0] == _STATUS.get(name, 200)
    if name == "CORS":
        assert lean[1]["access-control-allow-origin"] == "https://a.example"


def test_only_a_post_to_a_lean_route_skips_the_router(make_app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    routed: list[str] = []
    real = Router.app

    async def counted(self: Router, scope: Any, receive: Any, send: Any) -> None:
        routed.append(f"{scope['method']} {scope['path']}")
        await real(self, scope, receive, send)

    monkeypatch.setattr(Router, "app", counted)
    built = make_app()
    client = built.client()
    assert client.post(CHAT, json={"messages": USER}).status_code == 200
    assert client.post("/v1/completions", json={"prompt": "Hi"}).status_code == 200
    assert routed == []
    assert client.get(CHAT).status_code == 405  # another method: the router answers, as before
    r = client.post(CHAT + "/", json={"messages": USER}, follow_redirects=False)
    assert r.status_code == 307  # a trailing slash: the router's redirect, as before
    assert client.get("/v1/models").status_code == 200
    assert routed == [f"GET {CHAT}", f"POST {CHAT}/", "GET /v1/models"]


def test_an_exception_after_the_response_started_is_not_answered_twice() -> None:
    async def endpoint(request: Request):
        raise APIError("late", code="invalid_value")

    route = LeanRoute("/late", endpoint, methods=["POST"])
    sent: list[dict[str, Any]] = []

    async def started_app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise APIError("late", code="invalid_value")

    route.app = started_app
    handled: list[Exception] = []

    async def handler(request: Request, exc: Exception) -> JSONResponse:
        handled.append(exc)
        return JSONResponse({}, status_code=400)

    dispatch = LeanDispatch([route], {APIError: handler})

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/late", "headers": [], "query_string": b""}
    with pytest.raises(RuntimeError, match="already started"):
        asyncio.run(dispatch(scope, None, send))
    assert handled == [] and [m["type"] for m in sent] == ["http.response.start"]


def test_handlers_are_found_along_the_exception_classes_and_by_status() -> None:
    async def h_api(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({})

    async def h_418(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({})

    async def h_any(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({})

    class SubError(APIError):
        pass

    d = LeanDispatch([], {APIError: h_api, 418: h_418, Exception: h_any, 500: h_any})
    assert d._handler(SubError("x", code="invalid_value")) is h_api
    assert d._handler(StarletteHTTPException(418)) is h_418
    assert d._handler(StarletteHTTPException(404)) is None
    assert d._handler(ValueError("x")) is None  # Exception's handler is the error layer's, above the gateway
