"""A mixed streamed workload (plain, json_schema, tools) and what each stream must end with."""
from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
from jsonschema import Draft202012Validator

from tests.server_process import API_KEY

from ._probe import metric_in, scrape

__all__ = ["StreamResult", "mixed_bodies", "run_stream", "run_many", "generating", "PERSON", "WEATHER_TOOL"]

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"], "additionalProperties": False}}}


@dataclass
class StreamResult:
    kind: str
    status: int
    done: bool = False  # ended with data: [DONE]
    finish: str | None = None
    error: dict[str, Any] | None = None  # an error event, or the error envelope of a non-200
    content: str = ""
    calls: dict[int, dict[str, str]] = field(default_factory=dict)

    def problems(self) -> list[str]:
        """Why this stream did not end as documented ([] when it did)."""
        if self.status != 200:
            return [] if self.error and set(self.error) == {"message", "type", "param", "code"} else [f"bad {self.status}"]
        if not self.done:
            return ["no [DONE]"]
        if self.error is not None:
            return [] if set(self.error) == {"message", "type", "param", "code"} else ["bad error event"]
        if self.finish is None:
            return ["no finish_reason"]
        if self.kind == "json" and self.finish == "stop":
            if list(Draft202012Validator(PERSON).iter_errors(json.loads(self.content))):
                return ["json does not fit"]
        if self.kind == "tools" and self.finish == "tool_calls":
            params = WEATHER_TOOL["function"]["parameters"]
            for c in self.calls.values():
                if c["name"] != "get_weather" or list(Draft202012Validator(params).iter_errors(json.loads(c["arguments"]))):
                    return [f"bad call {c}"]
        return []


def mixed_bodies(n: int, *, model: str) -> list[tuple[str, dict[str, Any]]]:
    """n streamed requests cycling through plain, json_schema and tools (required)."""
    out = []
    for i in range(n):
        kind = ("plain", "json", "tools")[i % 3]
        body: dict[str, Any] = {"model": model, "stream": True, "temperature": 0.7, "seed": i,
                                "messages": [{"role": "user", "content": f"Tell me about city number {i}."}]}
        if kind == "plain":
            body["max_tokens"] = 16
        elif kind == "json":
            body.update(max_tokens=48, response_format={"type": "json_schema", "json_schema": {
                "name": "person", "schema": PERSON, "strict": True}})
        else:
            body.update(max_tokens=48, tools=[WEATHER_TOOL], tool_choice="required")
        out.append((kind, body))
    return out


def run_stream(base: str, kind: str, body: dict[str, Any], *, timeout: float = 1800,
               started: threading.Event | None = None) -> StreamResult:
    """One streamed request, read to its end; ``started`` is set once some content has arrived."""
    with httpx.Client(base_url=base, timeout=timeout, headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            res = StreamResult(kind, r.status_code)
            if r.status_code != 200:
                r.read()
                res.error = r.json().get("error")
                return res
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    res.done = True
                    break
                event = json.loads(data)
                if "error" in event:
                    res.error = event["error"]
                    continue
                for ch in event.get("choices") or []:
                    delta = ch.get("delta") or {}
                    res.content += delta.get("content") or ""
                    if started is not None and res.content:
                        started.set()
                    for tc in delta.get("tool_calls") or []:
                        entry = res.calls.setdefault(tc["index"], {"name": "", "arguments": ""})
                        entry["name"] += (tc.get("function") or {}).get("name") or ""
                        entry["arguments"] += (tc.get("function") or {}).get("arguments") or ""
                    res.finish = ch.get("finish_reason") or res.finish
            return res


def generating(base: str) -> tuple[float, float]:
    """(running, waiting) from the server's gauges: requests in flight, and those with no token yet.
    A scrape that fails or lacks either gauge raises (it is not read as zero)."""
    with httpx.Client(base_url=base, timeout=10, headers={"Authorization": f"Bearer {API_KEY}"}) as http:
        text = scrape(http)
    return metric_in(text, "gramserve_requests_running"), metric_in(text, "gramserve_requests_waiting")


def run_many(base: str, bodies: list[tuple[str, dict[str, Any]]], *, workers: int) -> list[StreamResult]:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda kb: run_stream(base, *kb), bodies))
