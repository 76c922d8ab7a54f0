"""End-to-end reasoning: SmolLM2 behind ``--reasoning-parser qwen3 --reasoning-required``.

The grammar forces the think block (SmolLM2 never writes ``</think>`` by itself), and
``max_reasoning_tokens`` closes it after N tokens, so the answer that follows is
constrained: a JSON document that fits its schema, or a tool call that fits its tool.
Checked: reasoning separated (no marker in either field), answer valid, streaming equals
non-streaming at temperature 0, ``reasoning_tokens`` reported, ``enable_thinking: false``
skips the block. One extra server for the module (about 45 s to start on 2 cores).
"""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.sse_validator import validate_sse

from .conftest import API_KEY, CLIENT_TIMEOUT_S, serving

pytestmark = pytest.mark.e2e

CAP = 40
MARKERS = ("<think>", "</think>")
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                           "population": {"type": "integer"}},
          "required": ["city", "population"], "additionalProperties": False}
JSON_REQ: dict[str, Any] = {
    "messages": [{"role": "user", "content": "Give the largest city of France and its population as JSON."}],
    "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}},
    "max_tokens": 200, "temperature": 0, "max_reasoning_tokens": CAP,
}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                   "required": ["city"], "additionalProperties": False}}}
TOOL_REQ: dict[str, Any] = {
    "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    "tools": [WEATHER], "tool_choice": "required",
    "max_tokens": 200, "temperature": 0, "max_reasoning_tokens": CAP,
}


@pytest.fixture(scope="module")
def reasoning_server():
    with serving(["--reasoning-parser", "qwen3", "--reasoning-required"], log_name="reasoning") as srv:
        yield srv


@pytest.fixture(scope="module")
def rhttp(reasoning_server):
    with httpx.Client(base_url=reasoning_server.base, headers={"Authorization": f"Bearer {API_KEY}"},
                      timeout=CLIENT_TIMEOUT_S) as c:
        yield c


def _post(http: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _stream(http: httpx.Client, body: dict[str, Any]) -> Any:
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200, r.read()
        return validate_sse("".join(r.iter_text()), expect_usage=True)


def _both(http: httpx.Client, body: dict[str, Any]) -> tuple[dict[str, Any], Any, float]:
    """The non-streamed body and the reconstructed stream of the same request, sent concurrently.

    Two requests, two batches: each is checked against the rules on its own, never against the
    other's words (greedy ties may break differently between batches).
    """
    t0 = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        plain = pool.submit(_post, http, body)
        streamed = pool.submit(_stream, http, body)
        return plain.result(), streamed.result(), time.perf_counter() - t0


def _no_markers(*texts: str | None) -> None:
    for t in texts:
        assert not any(m in (t or "") for m in MARKERS), t


def test_json_answer_after_capped_reasoning(rhttp):
    plain, streamed, seconds = _both(rhttp, JSON_REQ)
    choice = plain["choices"][0]
    msg = choice["message"]
    usage = plain["usage"]
    print(f"\n[e2e] json: {seconds:.1f}s, usage {usage}, reasoning {msg['reasoning_content']!r}, "
          f"answer {msg['content']!r}")
    assert msg["reasoning_content"], "the forced think block must come back as reasoning"
    assert "reasoning" not in msg  # --reasoning-field default: reasoning_content only
    _no_markers(msg["reasoning_content"], msg["content"])
    assert choice["finish_reason"] == "stop"
    Draft202012Validator(SCHEMA).validate(json.loads(msg["content"]))
    # the cap: re-tokenizing the reasoning may differ from the generated ids by a token or two
    assert 0 < usage["completion_tokens_details"]["reasoning_tokens"] <= CAP + 2
    assert usage["completion_tokens"] > usage["completion_tokens_details"]["reasoning_tokens"]
    # the stream, on its own: reasoning first, then an answer that fits the schema, no markers
    assert streamed.reasoning.get(0), "the stream must carry the reasoning"
    _no_markers(streamed.reasoning[0], streamed.content.get(0))
    assert streamed.finish_reason == {0: "stop"}
    Draft202012Validator(SCHEMA).validate(json.loads(streamed.content[0]))
    s_usage = streamed.usage
    assert 0 < s_usage["completion_tokens_details"]["reasoning_tokens"] <= CAP + 2
    assert s_usage["completion_tokens"] > s_usage["completion_tokens_details"]["reasoning_tokens"]


def test_tool_call_after_capped_reasoning(rhttp):
    plain, streamed, seconds = _both(rhttp, TOOL_REQ)
    choice = plain["choices"][0]
    msg = choice["message"]
    print(f"\n[e2e] tool: {seconds:.1f}s, usage {plain['usage']}, reasoning {msg['reasoning_content']!r}, "
          f"calls {msg['tool_calls']}")
    assert msg["reasoning_content"]
    _no_markers(msg["reasoning_content"], msg["content"])
    assert choice["finish_reason"] == "tool_calls"
    assert msg["tool_calls"], "tool_choice required must give a call"
    for call in msg["tool_calls"]:
        assert call["function"]["name"] == "get_weather"
        Draft202012Validator(WEATHER["function"]["parameters"]).validate(json.loads(call["function"]["arguments"]))
    assert plain["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0
    # the stream, on its own: reasoning, then only calls that fit the schema
    assert streamed.reasoning.get(0)
    _no_markers(streamed.reasoning[0], streamed.content.get(0))
    assert streamed.finish_reason == {0: "tool_calls"}
    got = [streamed.tool_calls[0][k] for k in sorted(streamed.tool_calls[0])]
    assert got, "tool_choice required must give a call in the stream too"
    for call in got:
        assert call["name"] == "get_weather" and call["id"].startswith("call_")
        Draft202012Validator(WEATHER["function"]["parameters"]).validate(json.loads(call["arguments"]))
    assert not streamed.content.get(0)
    assert streamed.usage["completion_tokens_details"]["reasoning_tokens"] > 0


def test_thinking_off_gives_plain_json(rhttp):
    body = {k: v for k, v in JSON_REQ.items() if k != "max_reasoning_tokens"}
    body["chat_template_kwargs"] = {"enable_thinking": False}
    t0 = time.perf_counter()
    plain = _post(rhttp, body)
    msg = plain["choices"][0]["message"]
    print(f"\n[e2e] thinking off: {time.perf_counter() - t0:.1f}s, usage {plain['usage']}, answer {msg['content']!r}")
    assert msg["reasoning_content"] is None
    assert plain["choices"][0]["finish_reason"] == "stop"
    Draft202012Validator(SCHEMA).validate(json.loads(msg["content"]))
    assert plain["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}
