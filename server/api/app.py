"""create_app(state): the FastAPI application around one engine."""
from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from server.api.lean_route import LeanDispatch, LeanRoute
from server.api.middleware import GatewayMiddleware
from server.api.routes import chat, completions, health, metrics, models, playground, responses, schemas
from server.api.routes._body import BodySchemasApp
from server.api.sse_response import BODY_SEND
from server.errors import install_error_handlers
from server.state import ServerState

__all__ = ["GramserveApp", "create_app"]


class GramserveApp(BodySchemasApp):
    """The FastAPI app, with two short cuts on the generation routes' hot path:

    - a stream's body messages take the server's own ``send``: every middleware (Starlette's error
      and exception layers, CORS, the gateway) reads only the response start, so each SSE event
      skips their wrappers (server/api/sse_response.py);
    - a POST to a :class:`LeanRoute` goes through the user middleware (the gateway, CORS) straight to
      :class:`LeanDispatch`, not through Starlette's error and exception layers, FastAPI's exit stack
      and the router (server/api/lean_route.py). Everything else takes the full stack."""

    _lean: tuple[LeanDispatch, ASGIApp] | None = None

    def _lean_stack(self) -> tuple[LeanDispatch, ASGIApp]:
        """Built on the first request, like Starlette's own stack, once the middleware is final."""
        if self._lean is None:
            dispatch = LeanDispatch((r for r in self.router.routes if isinstance(r, LeanRoute)),
                                    self.exception_handlers)
            app: ASGIApp = dispatch
            for cls, args, kwargs in reversed(self.user_middleware):
                app = cls(app, *args, **kwargs)
            self._lean = (dispatch, app)
        return self._lean

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[BODY_SEND] = send
            dispatch, stack = self._lean_stack()
            if dispatch.takes(scope):
                scope["app"] = self
                scope["router"] = self.router  # as Starlette's app and router set them (url_for reads both)
                await stack(scope, receive, send)
                return
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
