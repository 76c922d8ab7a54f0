"""Ending an SSE stream properly whatever happens: error event, ``[DONE]``, engine abort.

Once a stream has started its HTTP status is 200, so a failure is reported as one
``data: {"error": ...}`` event followed by ``[DONE]``. If the client goes away, the
engine request is aborted; the abort runs shielded, because the cancellation that
closes the stream would otherwise cancel the abort too.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TypeVar

import anyio
from starlette.types import Receive

from server import metrics
from server.chat.sse import DONE, Events, sse_event
from server.errors import APIError, ClientGone, internal_error
from server.state import ServerState

__all__ = ["abort_shielded", "guarded_stream", "ClientGone", "unless_disconnected"]

T = TypeVar("T")
E = TypeVar("E", bound=Events)  # a stream's items: events, or runs of them too (chat)

log = logging.getLogger("gramserve.stream")


def _chat_error(exc: APIError) -> list[bytes]:
    return [sse_event(exc.body()), DONE]


async def guarded_stream(events: AsyncIterator[E], *, state: ServerState, request_ids: Iterable[str],
                         on_error: Callable[[APIError], list[bytes]] = _chat_error) -> AsyncIterator[E | bytes]:
    """``events``, ended by ``on_error``'s events (chat: an error event and ``[DONE]``) when it fails
    (a run of events, ``Events``, reports its failure to the stream that yielded it, which raises
    it here when it resumes)."""
    clean = errored = False
    try:
        async with contextlib.aclosing(events):  # type: ignore[type-var]
            async for event in events:
                yield event
        clean = True
    except APIError as exc:
        errored = True
        yield b"".join(on_error(exc))  # the closing events are ready together: one write
    except Exception as exc:
        errored = True
        log.exception("stream failed")
        yield b"".join(on_error(internal_error(exc)))
    finally:
        if not clean:
            if not errored:
                metrics.CLIENT_DISCONNECTS.inc()
            await abort_shielded(state, request_ids)


async def abort_shielded(state: ServerState, request_ids: Iterable[str]) -> None:
    """Abort engine requests even from inside a cancelled task (client gone, server stopping)."""
    with anyio.CancelScope(shield=True):
        for rid in request_ids:
            await state.engine.abort(rid)



async def unless_disconnected(work: Awaitable[T], receive: Receive) -> T:
    """Await ``work`` (a non-streamed answer), cancelling it when the client disconnects.

    ``receive`` is the ASGI receive channel after the body was read: its next message is
    ``http.disconnect``. Cancelling ``work`` runs its cleanup, which aborts the engine request,
    so a departed client stops holding a generation slot.
    """
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    metrics.CLIENT_DISCONNECTS.inc()
    raise ClientGone()
