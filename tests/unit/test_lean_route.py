"""LeanRoute: the generation routes keep FastAPI's path, methods and OpenAPI entry without its
per-request machinery (server/api/lean_route.py)."""
from __future__ import annotations

import pytest
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from server.api.lean_route import LeanRoute


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
