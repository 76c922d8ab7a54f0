"""The one streamed response of every API: Starlette's ``StreamingResponse`` with each event sent on the
shortest path.

The response start goes through every middleware, which record the status and add headers. Body
messages pass each middleware below the gateway unchanged (Starlette's exception handlers only note
that the response started; the gateway only reads the start), so the events go straight to the
``send`` the gateway received (``BODY_SEND`` in the scope): per event, two coroutine hops and a
message check fewer on the hottest path of a stream. A middleware added inside the gateway must
therefore not change body messages (compression, for one, belongs outside it).
"""
from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

__all__ = ["BODY_SEND", "SSE_HEADERS", "SSEResponse"]

BODY_SEND = "gramserve.body_send"  # scope key: the send below which body messages need no wrapper
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # no caching, no proxy buffering


class SSEResponse(StreamingResponse):
    """``text/event-stream`` of the byte events ``content`` yields (each already framed)."""

    def __init__(self, content: AsyncIterator[bytes]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=SSE_HEADERS)
        self._body_send: Send | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._body_send = scope.get(BODY_SEND) or send
        await super().__call__(scope, receive, send)

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        body_send = self._body_send or send
        async for event in self.body_iterator:
            await body_send({"type": "http.response.body", "body": event, "more_body": True})
        await body_send({"type": "http.response.body", "body": b"", "more_body": False})
