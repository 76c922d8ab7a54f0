"""SSEResponse: the start through every middleware, the events straight to the gateway's send."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from server.api.sse_response import BODY_SEND, SSE_HEADERS, SSEResponse


async def _events() -> AsyncIterator[bytes]:
    for text in ("a", "b"):
        yield b"data: " + text.encode() + b"\n\n"


def _run(scope: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    wrapped: list[dict[str, Any]] = []
    below: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        wrapped.append(message)

    async def body_send(message: dict[str, Any]) -> None:
        below.append(message)

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)  # the client stays
        return {"type": "http.disconnect"}

    if scope.pop("with_body_send", False):
        scope[BODY_SEND] = body_send
    asyncio.run(SSEResponse(_events())(scope, receive, send))
    return wrapped, below


def _scope(**extra: Any) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "method": "POST", **extra}


def test_events_skip_the_wrappers_below_the_gateway() -> None:
    wrapped, below = _run(_scope(with_body_send=True))
    assert [m["type"] for m in wrapped] == ["http.response.start"]  # status and headers: every middleware
    headers = dict(wrapped[0]["headers"])
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert all(headers[k.lower().encode()] == v.encode() for k, v in SSE_HEADERS.items())
    assert [(m["body"], m["more_body"]) for m in below] == [(b"data: a\n\n", True), (b"data: b\n\n", True),
                                                           (b"", False)]


def test_without_a_gateway_everything_goes_through_send() -> None:
    wrapped, below = _run(_scope())
    assert not below
    assert [m["type"] for m in wrapped] == ["http.response.start"] + ["http.response.body"] * 3
    assert b"".join(m.get("body", b"") for m in wrapped[1:]) == b"data: a\n\ndata: b\n\n"


def _endless(closed: list[str]) -> AsyncIterator[bytes]:
    async def events() -> AsyncIterator[bytes]:
        try:
            while True:
                yield b"data: x\n\n"
                await asyncio.sleep(0.001)
        finally:
            closed.append("closed")  # guarded_stream aborts the engine request here
    return events()


def test_a_client_disconnect_ends_the_stream_and_runs_its_cleanup() -> None:
    closed: list[str] = []
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.02)
        return {"type": "http.disconnect"}

    async def main() -> bool:
        await SSEResponse(_endless(closed))(_scope(), receive, send)
        task = asyncio.current_task()
        assert task is not None
        await asyncio.sleep(0)  # no cancellation left over for the caller
        return task.cancelling() == 0

    assert asyncio.run(main())  # returns normally, as Starlette's StreamingResponse does
    assert closed == ["closed"]
    assert 1 < sum(m["type"] == "http.response.body" for m in sent)
    assert not any(m.get("more_body") is False for m in sent)  # cut, not finished


def test_the_servers_own_cancellation_still_cancels() -> None:
    closed: list[str] = []

    async def send(message: dict[str, Any]) -> None:
        pass

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)  # the client stays
        return {"type": "http.disconnect"}

    async def main() -> str:
        task = asyncio.create_task(SSEResponse(_endless(closed))(_scope(), receive, send))
        await asyncio.sleep(0.02)
        task.cancel()  # shutdown
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "returned"

    assert asyncio.run(main()) == "cancelled"
    assert closed == ["closed"]


def test_a_failing_receive_is_not_a_disconnect() -> None:
    wrapped: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        wrapped.append(message)

    async def receive() -> dict[str, Any]:
        raise RuntimeError("receive broke")

    asyncio.run(SSEResponse(_events())(_scope(), receive, send))
    assert b"".join(m.get("body", b"") for m in wrapped[1:]) == b"data: a\n\ndata: b\n\n"


def _bodies(stream: AsyncIterator[Any], receive: Any) -> list[bytes]:
    """The body messages' bytes an ``SSEResponse`` of ``stream`` sends (without a gateway)."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(SSEResponse(stream)(_scope(), receive, send))
    return [m["body"] for m in sent if m["type"] == "http.response.body"]


async def _stays() -> dict[str, Any]:
    await asyncio.sleep(3600)  # the client stays
    return {"type": "http.disconnect"}


def test_a_run_of_events_goes_out_one_write_each_and_is_closed_when_the_client_leaves() -> None:
    """An item that is a run of events (``server.chat.sse.Events``: a text lane) is iterated by the
    response itself, one body message per event; a disconnect inside it closes the run and the stream."""
    closed: list[str] = []

    async def run() -> AsyncIterator[bytes]:
        try:
            for _ in range(1000):
                yield b"data: r\n\n"
                await asyncio.sleep(0.001)
        finally:
            closed.append("run")

    async def stream() -> AsyncIterator[Any]:
        try:
            yield b"data: a\n\n"
            yield run()
            yield b"data: never\n\n"
        finally:
            closed.append("stream")

    async def leaves() -> dict[str, Any]:
        await asyncio.sleep(0.03)
        return {"type": "http.disconnect"}

    bodies = _bodies(stream(), leaves)
    assert bodies[0] == b"data: a\n\n" and len(bodies) > 2 and set(bodies[1:]) == {b"data: r\n\n"}
    assert closed == ["run", "stream"]


def test_a_finished_run_of_events_is_followed_by_the_rest_of_the_stream() -> None:
    async def run() -> AsyncIterator[bytes]:
        yield b"data: r1\n\n"
        yield b"data: r2\n\n"

    async def stream() -> AsyncIterator[Any]:
        yield b"data: a\n\n"
        yield run()
        yield b"data: z\n\n"

    assert _bodies(stream(), _stays) == [b"data: a\n\n", b"data: r1\n\n", b"data: r2\n\n", b"data: z\n\n", b""]
