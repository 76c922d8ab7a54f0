"""server/messages/replay.py: a replayed output gives the message and the deltas the server gives.

For every family (and with a reasoning parser), the same text is served by the front end
over the scripted FakeEngine (one engine chunk per scripted piece) and replayed with
parse_output / stream_output from the same pieces; the JSON must be equal, ids aside.
"""
from __future__ import annotations

import json
from typing import Any

import pytest

from server.messages.replay import parse_output, stream_output, tool_names
from tests.unit._front import CHAT, TIME_TOOL, WEATHER_TOOL, events
from tool_parsers import TOOL_PARSERS, get_family

TOOLS = [WEATHER_TOOL, TIME_TOOL]
CALLS = [("get_weather", '{"city": "Zürich"}'), ("get_time", "{}"), ("rm_rf", '{"path": "/"}')]


def _output(family: str, *, reasoning: bool) -> str:
    """Text, then three calls (the last to a name outside the tools), written as the family's
    format says; text first only where calls may follow text."""
    parser = get_family(family).parser
    written = parser.write([(name, json.loads(arguments)) for name, arguments in CALLS])
    text = ("Checking. " if parser.format.calls_follow_text else "") + written
    return ("<think>Which tools?</think>" if reasoning else "") + text


def _pieces(text: str, size: int = 5) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _same_ids(value: Any) -> Any:
    """The JSON with every call id replaced by its order of appearance (ids are random)."""
    seen: dict[str, str] = {}

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: (seen.setdefault(x, f"call_{len(seen)}") if k == "id" and isinstance(x, str) else walk(x))
                    for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(value)


CASES = [(family, None) for family in TOOL_PARSERS] + [("hermes", "qwen3"), ("mistral", "deepseek_r1")]


@pytest.mark.parametrize("family,reasoning", CASES, ids=[f"{f}-{r or 'plain'}" for f, r in CASES])
def test_replay_gives_what_the_server_gives(make_app: Any, family: str, reasoning: str | None) -> None:
    pieces = _pieces(_output(family, reasoning=reasoning is not None))
    built = make_app(script=lambda req: list(pieces), tool_parser=family, reasoning_parser=reasoning)
    client = built.client()
    body = {"messages": [{"role": "user", "content": "Weather?"}], "tools": TOOLS, "max_tokens": 1000}

    r = client.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    served = r.json()["choices"][0]
    replay = parse_output(pieces, tool_call_parser=family, reasoning_parser=reasoning, tools=TOOLS)
    assert _same_ids(replay.message) == _same_ids(served["message"])
    assert replay.finish_reason == served["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in replay.message["tool_calls"]] == ["get_weather", "get_time"]
    assert any("rm_rf" in note for note in replay.notes)  # dropped, as the server drops it

    r = client.post(CHAT, json={**body, "stream": True})
    assert r.status_code == 200, r.text
    chunks = [e for e in events(r.text) if e != "[DONE]" and e["choices"]]
    streamed = stream_output(pieces, tool_call_parser=family, reasoning_parser=reasoning, tools=TOOLS)
    assert _same_ids(list(streamed.deltas)) == _same_ids([c["choices"][0]["delta"] for c in chunks])
    assert streamed.finish_reason == chunks[-1]["choices"][0]["finish_reason"]
    assert _same_ids(streamed.message) == _same_ids(replay.message)
    if reasoning:
        assert replay.message["reasoning_content"] == "Which tools?"


def test_stream_output_cuts_text_into_chunks() -> None:
    text = _output("hermes", reasoning=False)
    per_char = stream_output(text, tool_call_parser="hermes", chunk=1, tools=TOOLS)
    whole = stream_output(text, tool_call_parser="hermes", chunk=len(text), tools=TOOLS)
    assert len(per_char.deltas) > len(whole.deltas) == 7  # role, text, header + arguments per call, {}
    every_name = stream_output(text, tool_call_parser="hermes", chunk=len(text))  # no tools: rm_rf kept
    assert len(every_name.deltas) == 9 and len(every_name.message["tool_calls"]) == 3
    assert whole.deltas[0] == {"role": "assistant", "content": ""} and whole.deltas[-1] == {}
    assert _same_ids(per_char.message) == _same_ids(whole.message)
    with pytest.raises(ValueError, match="at least 1"):
        stream_output(text, tool_call_parser="hermes", chunk=0)


def test_a_repeated_call_ends_the_turn_unless_allowed() -> None:
    call = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    guarded = parse_output(call * 3, tool_call_parser="hermes")
    assert len(guarded.message["tool_calls"]) == 1 and any("repeats" in n for n in guarded.notes)
    allowed = parse_output(call * 3, tool_call_parser="hermes", allow_duplicate_tool_calls=True)
    assert len(allowed.message["tool_calls"]) == 3 and not allowed.notes


def test_no_parser_and_no_thinking() -> None:
    replay = parse_output("<think>x</think>Hi", tool_call_parser=None, reasoning_parser="qwen3")
    assert (replay.message["content"], replay.message["reasoning_content"]) == ("Hi", "x")
    assert replay.message["tool_calls"] is None and replay.finish_reason == "stop"
    off = parse_output("Hi", tool_call_parser=None, reasoning_parser="deepseek_r1", thinking=False)
    assert (off.message["content"], off.message["reasoning_content"]) == ("Hi", None)
    assert json.loads(json.dumps(off.to_json()))["message"]["content"] == "Hi"


def test_tool_names_reads_both_shapes_and_refuses_custom_tools() -> None:
    flat = {"type": "function", "name": "f", "parameters": {}}
    assert tool_names([WEATHER_TOOL, flat]) == ("get_weather", "f")
    assert tool_names(None) is None
    with pytest.raises(ValueError, match="tools\\[0\\]"):
        tool_names([{"type": "custom", "custom": {"name": "c"}}])
    with pytest.raises(ValueError, match="unknown tool parser"):
        parse_output("x", tool_call_parser="nope")


def test_tool_parsers_import_nothing_of_the_server() -> None:
    """The replay runs the server's parsing code without the server: nothing below imports it."""
    from pathlib import Path

    from tests.unit.test_layers import _imports

    paths = sorted((Path(__file__).resolve().parents[2] / "tool_parsers").glob("*.py"))
    assert len(paths) > 5
    assert {p.name: _imports(p) for p in paths if _imports(p)} == {}
