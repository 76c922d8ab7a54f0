"""server/messages/replay.py: a replayed output gives the message and the deltas the server gives.

For every family (and with a reasoning parser), the same text is served by the front end
over the scripted FakeEngine (one engine chunk per scripted piece) and replayed with
parse_output / stream_output from the same pieces; the JSON must be equal, ids aside.
"""
from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit._front import CHAT, TIME_TOOL, WEATHER_TOOL, events
from tool_parsers import TOOL_PARSERS, get_family
from server.messages.replay import parse_output, stream_output, tool_names

TOOLS = [WEATHER_TOOL, TIME_TOOL]
CALLS = [("get_weather", '{"city": "Zürich"}'), ("get_time", "{}"), ("rm_rf", '{"path": "/"}')]


def _output(family: str, *, reasoning: bool) -> str:
    """Text, then three calls (the last to a name outside the tools), written as the family's
    format says; text first only where calls may follow text."""
    f = get_family(family).format
    if f.arguments_style == "qwen_xml":  # arguments as XML parameters
        calls = [(n, "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in json.loads(a).items()))
                 for n, a in CALLS]
    elif f.arguments_style == "glm_xml":  # arguments as <arg_key>/<arg_value> pairs
        calls = [(n, "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in json.loads(a).items()))
                 for n, a in CALLS]
    elif f.arguments_style in ("deepseek_xml", "deepseek_v4_1_xml"):  # DSML parameters: raw strings, else JSON
        tag = "｜DSML｜ parameter" if f.arguments_style == "deepseek_v4_1_xml" else "｜DSML｜parameter"
        calls = [(n, "".join(f'<{tag} name="{k}" string="{str(isinstance(v, str)).lower()}">'
                             f'{v if isinstance(v, str) else json.dumps(v)}</{tag}>\n' for k, v in json.loads(a).items()))
                 for n, a in CALLS]
    elif f.arguments_style == "minimax_xml":  # MiniMax M2: <parameter name="k">v</parameter>
        calls = [(n, "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in json.loads(a).items())) for n, a in CALLS]
    elif f.arguments_style == "minimax_m3_xml":  # MiniMax M3: an element per parameter behind its marker
        ns = "]<]minimax[>["
        calls = [(n, "".join(f"{ns}<{k}>{v}{ns}</{k}>\n" for k, v in json.loads(a).items())) for n, a in CALLS]
    elif f.arguments_style == "kimi_k3_xml":  # Kimi K3: type-tagged XTML arguments
        calls = [(n, "".join(f'<|open|>argument key="{k}" type="string"<|sep|>{v}<|close|>argument<|sep|>'
                             for k, v in json.loads(a).items())) for n, a in CALLS]
    elif f.arguments_style == "gemma4":  # Gemma 4's notation: {k:<|"|>v<|"|>,...}
        from tool_parsers.gemma4 import gemma_literal

        calls = [(n, gemma_literal(json.loads(a))) for n, a in CALLS]
    elif f.arguments_style == "pythonic":  # keyword arguments, values as Python literals
        calls = [(n, ", ".join(f"{k}={json.dumps(v)}" for k, v in json.loads(a).items())) for n, a in CALLS]
    else:
        calls = list(CALLS)
    body = f.separator.join(f.call_begin + name + f.name_end + args + f.call_end for name, args in calls)
    text = ("Checking. " if f.calls_follow_text else "") + f.section_begin + body + f.section_end
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
