"""The generation routes' own FastAPI route class: documented like any route, called without
FastAPI's per-request machinery.

A FastAPI route wraps its endpoint in dependency solving, two exit stacks and its own exception
wrapper: about 45 µs a request that the generation routes, which read their raw ``Request`` and
have no dependencies, do not use (py-spy and cProfile of the live API process,
docs/performance.md). :class:`LeanRoute` keeps everything FastAPI builds from the route (the
path, the methods, the OpenAPI entry) and calls the endpoint with the ``Request`` alone; its
errors reach the app's one exception handler exactly as before (Starlette's
``ExceptionMiddleware`` sits above every route).
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["LeanRoute"]


class LeanRoute(APIRoute):
    """An ``APIRoute`` whose endpoint takes the ``Request`` and returns a ``Response``; nothing
    else (no parameters, no dependencies, no response model) is read."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        d = self.dependant
        if (d.dependencies or d.path_params or d.query_params or d.header_params or d.cookie_params
                or d.body_params or self.response_model is not None):
            raise TypeError(f"{path}: a LeanRoute endpoint takes only the Request and returns a Response")
        handler: Callable[[Request], Awaitable[Response]] = endpoint

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            response = await handler(Request(scope, receive, send))
            await response(scope, receive, send)

        self.app = app
