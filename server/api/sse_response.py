"""The one streamed response of every API: ``text/event-stream``, each event sent on the shortest
path, and the stream cancelled when the client goes away.

The response start goes through every middleware, which record the status and add headers. Body
messages pass each middleware unchanged (Starlette's error and exception layers only note that the
response started; CORS and the gateway only read the start), so the events go straight to the
server's own ``send``, which the app puts in the scope (``BODY_SEND``, ``server/api/app.py``): per
event, three coroutine hops and message checks fewer on the hottest path of a stream. A middleware
added to the app must therefore not change body messages (compression, for one, belongs in front
of the app, not inside it).

An item of the stream is one write's events, or a run of events (``server.chat.sse.Events``: a
choice's lane, server/plan/lanes.py) that this response iterates itself, one write per event, while
the generators that yielded it wait: the per-token path is then the engine's chunks, the lane and
this loop, and nothing between.

The client's disconnect is watched by one plain asyncio task that cancels the streaming task
(uvicorn speaks ASGI 2.3, so a send to a closed connection is silently dropped and only
``receive`` tells). Starlette's ``StreamingResponse`` does the same with an anyio task group and
cancel scopes, about 120 µs a request in cancel-scope bookkeeping (and a ``repr`` of the task per
cancel); this is one task and one ``cancel``. The stream's own cleanup (``guarded_stream``: the
engine abort) runs on that cancellation as before.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import cast

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from server.chat.sse import Events

__all__ = ["BODY_SEND", "SSE_HEADERS", "SSEResponse"]

BODY_SEND = "gramserve.body_send"  # scope key: the server's send, which body messages take directly
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # no caching, no proxy buffering


class SSEResponse(StreamingResponse):
    """``text/event-stream`` of the byte events ``content`` yields (each already framed): an item
    is one write, or a run of events (``server.chat.sse.Events``) written one by one as they come."""

    def __init__(self, content: AsyncIterator[Events]) -> None:
        super().__init__(cast(AsyncIterator[bytes], content), media_type="text/event-stream", headers=SSE_HEADERS)
        self.events = content

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        gone = False

        async def watch() -> None:
            nonlocal gone
            with contextlib.suppress(Exception):  # a failing receive is no disconnect: the stream goes on
                while (await receive())["type"] != "http.disconnect":
                    pass
                gone = True
                task.cancel()

        watcher = asyncio.create_task(watch())
        body_send = scope.get(BODY_SEND) or send
        events = self.events
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for event in events:
                if isinstance(event, bytes):
                    await body_send({"type": "http.response.body", "body": event, "more_body": True})
                    continue
                async with contextlib.aclosing(event) as run:  # a run of events (a text lane): as they come
                    async for one in run:
                        await body_send({"type": "http.response.body", "body": one, "more_body": True})
            await body_send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not gone:
                raise  # the server's cancellation (shutdown), not the client's
            task.uncancel()  # the client left: the response ends here, as Starlette's does
        finally:
            watcher.cancel()
            aclose = getattr(events, "aclose", None)
            if aclose is not None:  # cancelled while sending: the stream's cleanup (engine abort) runs now
                await aclose()
