"""Shared helpers for the front-end tests over ASGI with the scripted FakeEngine.

FakeEngine counts one token per character and yields one chunk per scripted piece, so
every count in these tests is exact.
"""
from __future__ import annotations

import json
from typing import Any

__all__ = ["CHAT", "HELLO", "USER", "WEATHER_TOOL", "TIME_TOOL", "WEATHER_SCRIPT", "script", "chat", "stream_raw", "streamed",
           "events", "pieces", "count_updates", "masked"]

CHAT = "/v1/chat/completions"
HELLO = "Hello world!"  # FakeEngine's default script: "Hello", " world", "!"
USER = [{"role": "user", "content": "Hi"}]

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "description": "The time now"}}
WEATHER_SCRIPT = ["<tool", "_call>\n{\"name\": \"get_weather\", \"argu", "ments\": {\"city\": \"Par",
                  "is\"}}\n</tool_call>"]


def script(pieces: list[str]):
    return lambda req: list(pieces)


def pieces(text: str, size: int) -> list[str]:
    """``text`` cut every ``size`` characters: a scripted engine's chunks."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def masked(raw: str, masks: list[tuple[Any, str]]) -> bytes:
    """A stream's bytes with each ``(pattern, replacement)`` applied: random ids and times made equal."""
    for pattern, repl in masks:
        raw = pattern.sub(repl, raw)
    return raw.encode()


def streamed(client: Any, path: str, body: dict[str, Any], masks: list[tuple[Any, str]]) -> bytes:
    """A streamed answer's bytes from ``path`` (200 asserted), ``masks`` applied (``masked``)."""
    with client.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        return masked("".join(r.iter_text()), masks)


def count_updates(monkeypatch: Any) -> list[int]:
    """One entry per ``ChoiceUpdate`` the run loop makes from now on (``Run``'s per-chunk updates)."""
    from server.plan import run

    made: list[int] = []

    class Counted(run.ChoiceUpdate):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(run, "ChoiceUpdate", Counted)
    return made


def chat(client: Any, **body: Any) -> Any:
    body.setdefault("messages", USER)
    return client.post(CHAT, json=body)


def stream_raw(client: Any, **body: Any) -> str:
    body.setdefault("messages", USER)
    body["stream"] = True
    with client.stream("POST", CHAT, json=body) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return "".join(r.iter_text())


def events(raw: str) -> list[Any]:
    out = []
    for block in raw.split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out

