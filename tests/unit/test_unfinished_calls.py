"""The rule for an unfinished call (docs/tool_calling.md), through the server: a call the output
ends inside, or whose arguments break, comes back kept as far as it was written well, with the
same message and the same ``finish_reason`` streamed and not: ``stop`` when the model stopped,
``length`` when ``max_tokens`` cut it, never ``tool_calls``. Both answers read their finish
reason from ``server.messages.openai_message.finish_reason`` (``server/plan/run.py``)."""
from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit._front import CHAT, events, stream_raw

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
WHOLE = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CUT = WHOLE[: WHOLE.index("Paris") + 3]  # ... {"city": "Par


def _streamed(client: Any, body: dict[str, Any]) -> tuple[str, list[tuple[str, str]], str | None]:
    content, calls, finish = "", {}, None
    for event in events(stream_raw(client, **body)):
        if event == "[DONE]" or not event["choices"]:
            continue
        choice = event["choices"][0]
        content += choice["delta"].get("content") or ""
        for tc in choice["delta"].get("tool_calls") or ():
            entry = calls.setdefault(tc["index"], ["", ""])
            entry[0] += tc["function"].get("name") or ""
            entry[1] += tc["function"].get("arguments") or ""
        finish = choice["finish_reason"] or finish
    return content, [(n, a) for n, a in calls.values()], finish


def _whole(client: Any, body: dict[str, Any]) -> tuple[str, list[tuple[str, str]], str | None]:
    r = client.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    msg = choice["message"]
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in msg["tool_calls"] or ()]
    return msg["content"] or "", calls, choice["finish_reason"]


@pytest.mark.parametrize("script,max_tokens,want", [
    # the model stopped inside the call: kept as written, "stop"
    ([CUT[i : i + 5] for i in range(0, len(CUT), 5)], 1000, ([("get_weather", '{"city": "Par')], "stop")),
    # max_tokens cut it: the same call, "length"
    ([WHOLE[i : i + 5] for i in range(0, len(WHOLE), 5)], len(CUT), ([("get_weather", '{"city": "Par')], "length")),
    # its arguments broke (--no-tool-constraints): kept up to the break, "stop"
    ([WHOLE.replace('"Paris"', '"Paris",,')], 1000, ([("get_weather", '{"city": "Paris",')], "stop")),
    # a complete call: "tool_calls"
    ([WHOLE], 1000, ([("get_weather", '{"city": "Paris"}')], "tool_calls")),
], ids=["model_stopped", "max_tokens", "broken_arguments", "complete"])
def test_streamed_and_whole_end_alike(make_app: Any, script: list[str], max_tokens: int,
                                      want: tuple[list[tuple[str, str]], str]) -> None:
    built = make_app(script=lambda req: list(script))
    client = built.client()
    body = {"messages": [{"role": "user", "content": "Weather?"}], "tools": TOOLS, "max_tokens": max_tokens}
    whole = _whole(client, body)
    streamed = _streamed(client, body)
    assert whole == streamed
    assert (whole[1], whole[2]) == want
    if want[1] == "tool_calls":
        assert all(isinstance(json.loads(a), dict) for _, a in whole[1])
