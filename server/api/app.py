"""create_app(state): the FastAPI application around one engine."""
from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from server.api.middleware import GatewayMiddleware
from server.api.routes import chat, completions, health, metrics, models, playground, responses, schemas
from server.api.routes._body import BodySchemasApp
from server.errors import install_error_handlers
from server.state import ServerState

__all__ = ["create_app"]


def create_app(state: ServerState) -> FastAPI:
    app = BodySchemasApp(title="gramserve", version="0.1.0", docs_url=None, redoc_url=None)
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
