"""create_app(state): the FastAPI application around one engine."""
from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import Receive, Scope, Send

from server.api.middleware import GatewayMiddleware
from server.api.routes import chat, completions, health, metrics, models, playground, responses, schemas
from server.api.routes._body import BodySchemasApp
from server.api.sse_response import BODY_SEND
from server.errors import install_error_handlers
from server.state import ServerState

__all__ = ["GramserveApp", "create_app"]


class GramserveApp(BodySchemasApp):
    """The FastAPI app, which hands a stream's body messages the server's own ``send``: every
    middleware (Starlette's error and exception layers, CORS, the gateway) reads only the
    response start, so each SSE event skips their wrappers (server/api/sse_response.py)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[BODY_SEND] = send
        await super().__call__(scope, receive, send)


def create_app(state: ServerState) -> FastAPI:
    app = GramserveApp(title="gramserve", version="0.1.0", docs_url=None, redoc_url=None)
    app.state.gs = state
    install_error_handlers(app)
    app.state.responses_store = responses.new_store(state.settings)
    for module in (chat, completions, responses, models, health, metrics, schemas, playground):
        app.include_router(module.router)
    if state.settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(state.settings.cors_origins),
                           allow_methods=["*"], allow_headers=["*"])
    app.add_middleware(GatewayMiddleware, state=state)
    return app
