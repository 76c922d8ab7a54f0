"""bench.transport_floor: one SSE event per engine output with text, the usage and [DONE], as bench.serve reads them."""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

from bench.serve import parse_sse_line
from bench.transport_floor import TransportFloorApp


class _Engine:
    """DirectEngine's surface: prepare a body, generate vLLM-shaped outputs."""

    state = SimpleNamespace(engine=SimpleNamespace(model_name="m"))

    def __init__(self) -> None:
        self.prepared: list[dict[str, Any]] = []

    def prepare(self, body: dict[str, Any]) -> tuple[list[int], Any, bool]:
        self.prepared.append(body)
        return [1, 2, 3], "params", False

    async def generate(self, ids: list[int], params: Any, request_id: str) -> AsyncIterator[Any]:
        assert ids == [1, 2, 3] and params == "params"
        for text, n in (("Hel", 1), ("", 1), ("lo", 2)):  # an output may carry tokens but no text yet
            yield SimpleNamespace(outputs=[SimpleNamespace(index=0, text=text, token_ids=[0] * n)])


def _call(app: TransportFloorApp, path: str, body: bytes = b"") -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": body[:5], "more_body": True},
                {"type": "http.request", "body": body[5:], "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app({"type": "http", "path": path}, receive, send))
    return sent


def test_each_output_with_text_is_one_event_then_usage_and_done() -> None:
    engine = _Engine()
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    sent = _call(TransportFloorApp(engine), "/v1/chat/completions", json.dumps(body).encode())
    assert engine.prepared == [body]  # the body read whole, across two receive() messages
    assert sent[0]["status"] == 200 and sent[-1]["more_body"] is False
    stream = b"".join(m.get("body", b"") for m in sent[1:]).decode()
    events = [line for line in stream.split("\n") if line]
    assert events[-1] == "data: [DONE]"
    texts = [json.loads(e[6:])["choices"][0]["delta"]["content"] for e in events[:-2]]
    assert texts == ["Hel", "lo"]
    assert parse_sse_line(events[-2])[1] == 4  # completion tokens counted over every output


def test_health() -> None:
    sent = _call(TransportFloorApp(_Engine()), "/health")
    assert sent[0]["status"] == 200 and json.loads(sent[1]["body"]) == {"status": "ok"}
