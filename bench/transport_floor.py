"""The HTTP floor: the least any uvicorn front end on vLLM's ``AsyncLLM`` pays to stream a chat answer.

A bare ASGI app on uvicorn (httptools, on gramserve's event loop: ``--event-loop``), no FastAPI, no
middleware, no parsing: a chat request is prepared as the engine-alone target prepares it
(``bench.engine_direct.DirectEngine.prepare``: gramserve's own plan, so the same template, prompt
tokens and constraint), on the event loop, then each engine output goes out as one SSE event, framed
from pre-encoded bytes (``ContentFrames``: a tool call's text is sent as content, unparsed), with the
usage chunk and ``[DONE]`` at the end. So it pays what every such server pays (HTTP parsing, one ASGI send and one
socket write per event, vLLM's output path, one task wake-up per request per engine step) and
nothing of what makes an answer trustworthy (no stream parse, no tool calls, no checks, no
metrics, no logs). Between the engine alone (``bench/engine_direct.py``) and gramserve it splits
the cost above the floor into the transport's share and gramserve's own.

Not a server for users: it answers only streamed chat requests, and only what ``bench.serve``
reads.

    python -m bench.transport_floor --port 8700 [-- gramserve serve flags]
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from typing import Any

__all__ = ["TransportFloorApp", "main", "read_body"]


async def read_body(receive: Any) -> bytes:
    """A request's whole body, as any bare ASGI app reads it."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


class TransportFloorApp:
    """The bare ASGI app (see the module docstring) around ``engine``: a
    :class:`bench.engine_direct.DirectEngine` (its ``prepare``, its ``llm``, its model name)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.model = engine.state.engine.model_name
        self._ids = itertools.count()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["path"] == "/health":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"status":"ok"}'})
            return
        await self._stream(json.loads(await read_body(receive)), send)

    async def _stream(self, body: dict[str, Any], send: Any) -> None:
        from server.chat.sse import DONE, ContentFrames, chunk, sse_event
        from server.protocol import usage_dict

        ids, params, _ = self.engine.prepare(body)
        rid, created = f"floor-{next(self._ids)}", int(time.time())
        frames = ContentFrames(id=rid, created=created, model=self.model)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
        tokens = 0
        async for out in self.engine.generate(ids, params, rid):
            for c in out.outputs:
                tokens += len(c.token_ids)
                if c.text:
                    await send({"type": "http.response.body", "body": frames.content(c.index, c.text), "more_body": True})
        usage = sse_event(chunk(id=rid, created=created, model=self.model, choices=[],
                                usage=usage_dict(len(ids), tokens)))
        await send({"type": "http.response.body", "body": usage + DONE, "more_body": False})


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.transport_floor", description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8700)
    ap.add_argument("serve_args", nargs="*", help="gramserve serve flags (after --)")
    return ap


async def _amain(a: argparse.Namespace) -> None:
    import uvicorn

    from bench.engine_direct import DirectEngine

    app = TransportFloorApp(DirectEngine(a.serve_args))
    config = uvicorn.Config(app, host=a.host, port=a.port, http="httptools", lifespan="on",
                            access_log=False, log_level="warning")
    try:
        await uvicorn.Server(config).serve()
    finally:
        app.engine.llm.shutdown()


def main(argv: list[str] | None = None) -> int:
    from server.config import settings_from_args
    from server.runner import run_on_loop

    a = _parser().parse_args(argv)
    # gramserve's own loop (--event-loop among the serve flags), so the floor is the same transport's
    run_on_loop(_amain(a), settings_from_args(a.serve_args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
