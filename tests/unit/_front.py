"""Shared helpers for the front-end tests over ASGI with the scripted FakeEngine.

FakeEngine counts one token per character and yields one chunk per scripted piece, so
every count in these tests is exact.
"""
from __future__ import annotations

import json
from typing import Any

__all__ = ["CHAT", "HELLO", "USER", "WEATHER_TOOL", "TIME_TOOL", "WEATHER_SCRIPT", "script", "chat", "stream_raw",
           "events"]

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

