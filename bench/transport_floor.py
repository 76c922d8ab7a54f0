"""The HTTP floor: the least any uvicorn front end on vLLM's ``AsyncLLM`` pays to stream a chat answer.

A bare ASGI app on uvicorn (httptools), no FastAPI, no middleware, no parsing: a chat request is
prepared by gramserve's own ``build_plan`` (template, prompt tokens, constraint), on the event loop,
then each engine output goes out as one SSE event, framed from pre-encoded bytes
(``ContentFrames``: a tool call's text is sent as content, unparsed), with the usage chunk and
``[DONE]`` at the end. So it pays what every such server pays (HTTP parsing, one ASGI send and one
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
import asyncio
import itertools
import json
from typing import Any

__all__ = ["TransportFloorApp", "main"]


class TransportFloorApp:
    """The bare ASGI app (see the module docstring)."""

    def __init__(self, serve_args: list[str]) -> None:
        from server.config import settings_from_args
        from server.runner import build_state

        self.state = build_state(settings_from_args(serve_args))
        self.llm = self.state.engine._llm  # type: ignore[attr-defined]
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
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await self._stream(json.loads(body), send)

    async def _stream(self, body: dict[str, Any], send: Any) -> None:
        from vllm.inputs.engine import tokens_input

        from server.chat.sse import DONE, ContentFrames, chunk, sse_event
        from server.plan import build_plan
        from server.protocol import ChatCompletionRequest, usage_dict

        req = ChatCompletionRequest.model_validate(body)
        plan = build_plan(self.state, req)
        gen = plan.gen
        params = self.state.engine._sampling_params(gen)  # type: ignore[attr-defined]
        model = self.state.engine.model_name
        frames = ContentFrames(id=plan.id, created=plan.created, model=model)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
        tokens = 0
        async for out in self.llm.generate(tokens_input(list(gen.prompt_token_ids)), params, f"floor-{next(self._ids)}"):
            for c in out.outputs:
                tokens += len(c.token_ids)
                if c.text:
                    await send({"type": "http.response.body", "body": frames.content(c.index, c.text), "more_body": True})
        usage = sse_event(chunk(id=plan.id, created=plan.created, model=model, choices=[],
                                usage=usage_dict(len(gen.prompt_token_ids), tokens)))
        await send({"type": "http.response.body", "body": usage + DONE, "more_body": False})


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.transport_floor", description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8700)
    ap.add_argument("serve_args", nargs="*", help="gramserve serve flags (after --)")
    return ap


async def _amain(a: argparse.Namespace) -> None:
    import uvicorn

    app = TransportFloorApp(a.serve_args)
    config = uvicorn.Config(app, host=a.host, port=a.port, http="httptools", loop="asyncio", lifespan="on",
                            access_log=False, log_level="warning")
    try:
        await uvicorn.Server(config).serve()
    finally:
        app.llm.shutdown()


def main(argv: list[str] | None = None) -> int:
    asyncio.run(_amain(_parser().parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
