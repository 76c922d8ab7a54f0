"""The generation routes' own FastAPI route class, and the dispatch that reaches them without
FastAPI's and Starlette's per-request layers.

A FastAPI route wraps its endpoint in dependency solving, two exit stacks and its own exception
wrapper: about 45 µs a request that the generation routes, which read their raw ``Request`` and
have no dependencies, do not use (py-spy and cProfile of the live API process,
docs/performance.md). :class:`LeanRoute` keeps everything FastAPI builds from the route (the
path, the methods, the OpenAPI entry) and calls the endpoint with the ``Request`` alone.

Above the routes the app still stacks Starlette's error layer, the user middleware (the gateway,
CORS), Starlette's exception layer, FastAPI's exit stack and the router, each a coroutine and some
a closure per request: about 30-45 µs a request in process that a POST to a lean route does not
need. :class:`LeanDispatch` is what the app calls instead for those POSTs, under the same user
middleware (``GramserveApp``, server/api/app.py): it finds the route by its exact path and maps an
exception to a response with the app's own handlers, as Starlette's exception layer does; an
exception no handler takes (and any after the response started) goes up to the gateway, as it
did. Everything else (another method, a path with a trailing slash, a ``root_path``) takes the
full stack.
"""
from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

__all__ = ["ExceptionHandler", "LeanDispatch", "LeanRoute"]

ExceptionHandler = Callable[[Request, Any], "Response | Awaitable[Response]"]  # as Starlette's


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


class LeanDispatch:
    """ASGI app for the POSTs to ``routes`` (by exact path), with the app's exception handlers.

    Per-process and immutable: built once from the finished app (``GramserveApp``)."""

    def __init__(self, routes: Iterable[LeanRoute], handlers: Mapping[Any, ExceptionHandler]) -> None:
        self.routes = {r.path: r for r in routes if r.methods and "POST" in r.methods}
        # Starlette's exception layer: classes looked up along the exception's MRO, a status code for
        # an HTTPException; ``Exception`` (and 500) belong to the error layer above the gateway.
        self._by_class = {k: v for k, v in handlers.items() if isinstance(k, type) and k is not Exception}
        self._by_status = {k: v for k, v in handlers.items() if isinstance(k, int) and k != 500}

    def takes(self, scope: Scope) -> bool:
        """Whether this request is one of ours (else the app's full stack serves it)."""
        return scope["method"] == "POST" and not scope.get("root_path") and scope["path"] in self.routes

    def _handler(self, exc: Exception) -> ExceptionHandler | None:
        if isinstance(exc, HTTPException) and (h := self._by_status.get(exc.status_code)) is not None:
            return h
        for cls in type(exc).__mro__:
            if (h := self._by_class.get(cls)) is not None:
                return h
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes[scope["path"]]
        scope["route"] = route  # what the router would have set
        scope["endpoint"] = route.endpoint
        scope["path_params"] = {}
        started = False

        async def sender(message: Message) -> None:  # the response start only: a stream's events skip it
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await route.app(scope, receive, sender)
        except Exception as exc:
            handler = self._handler(exc)
            if handler is None:
                raise
            if started:
                raise RuntimeError("Caught handled exception, but response already started.") from exc
            response = handler(Request(scope, receive, send), exc)
            if inspect.isawaitable(response):  # (gramserve's one handler is async; Starlette allows both)
                response = await response
            await response(scope, receive, sender)
            exc.__traceback__ = None  # as Starlette does: a reused exception would keep every traceback
