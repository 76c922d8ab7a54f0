"""server/plan/chat_frames.py: the per-token fast paths (a text delta, an arguments fragment framed by
``ContentFrames`` without building a chunk dict) give exactly the bytes the general path gives, for every
kind of stream: the same requests are streamed with ``FAST_PATHS`` on and off and the SSE bodies compared
byte for byte (only the random ids and the creation time are masked)."""
from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from server.plan import chat_frames
from tests.unit._front import WEATHER_TOOL, count_updates, masked, stream_raw
from tests.unit._front import pieces as _pieces

TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}
TRICKY = 'He said "hi"\n\t\\ \u2028 \U0001f600 </script> \x1f é'  # escapes the fast framing must match
CALLS = ('Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par\\"is \u00e9"}}\n</tool_call>\n'
         '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>')
PART = "Lisbon é \\\\ "  # (as the call's JSON writes it: an escaped backslash)
LONG = ('Sure, saving it.<tool_call>\n{"name": "get_weather", "arguments": {"city": "' + PART * 12
        + '"}}\n</tool_call>')  # prose, then a call whose arguments take many chunks
SHELL = {"type": "custom", "custom": {"name": "shell", "description": "Run a shell command."}}
_MASK = [(re.compile(r"chatcmpl-[0-9a-f]+"), "chatcmpl-X"), (re.compile(r'"created":\s?\d+'), '"created":0'),
         (re.compile(r"call_[A-Za-z0-9]+"), "call_X")]


CASES: dict[str, tuple[dict[str, Any], list[str], dict[str, Any]]] = {
    # name: (make_app options, engine pieces, request body)
    "text": ({}, ["Hello", " world", "!"], {}),
    "escapes": ({}, _pieces(TRICKY, 3), {}),
    "n2_usage": ({}, _pieces(TRICKY, 4), {"n": 2, "stream_options": {"include_usage": True}}),
    "logprobs": ({}, ["Hi", " there"], {"logprobs": True, "top_logprobs": 2}),
    "tools": ({}, _pieces(CALLS, 5), {"tools": [WEATHER_TOOL, TIME_TOOL]}),
    "tools_per_char": ({}, list(CALLS), {"tools": [WEATHER_TOOL, TIME_TOOL], "n": 2}),
    "reasoning_then_call": ({"reasoning_parser": "qwen3"}, _pieces("<think>Plan " + TRICKY + "</think>" + CALLS, 4),
                            {"tools": [WEATHER_TOOL, TIME_TOOL]}),
    "legacy_functions": ({}, _pieces(CALLS, 6), {"functions": [WEATHER_TOOL["function"], TIME_TOOL["function"]]}),
    "length": ({}, _pieces(TRICKY * 3, 2), {"max_tokens": 7}),
    "text_empty_chunks": ({}, ["", "Hello", "", " world", "", "!"], {"stream_options": {"include_usage": True}}),
    "text_tools_none": ({}, _pieces(CALLS, 5), {"tools": [WEATHER_TOOL], "tool_choice": "none"}),
    "text_reasoning": ({"reasoning_parser": "qwen3"}, _pieces("<think>Plan</think>" + TRICKY, 3), {}),
    "long_call": ({}, _pieces(LONG, 2), {"tools": [WEATHER_TOOL, TIME_TOOL]}),
    "long_call_reasoning": ({"reasoning_parser": "qwen3"}, _pieces("<think>Plan " + TRICKY + "</think>" + LONG, 3),
                            {"tools": [WEATHER_TOOL, TIME_TOOL]}),
    "custom_tool": ({}, _pieces('<tool_call>\n{"name": "shell", "arguments": {"input": "ls -la \\"x\\""}}\n</tool_call>', 2),
                    {"tools": [SHELL, WEATHER_TOOL]}),
    "tools_repeat": ({}, _pieces("Sure. " + CALLS.split("<tool_call>", 1)[1].join(["<tool_call>"] * 3) + " more", 3),
                     {"tools": [WEATHER_TOOL, TIME_TOOL]}),  # (the guard ends the turn at the repeated call)
}


def _stream(make_app: Any, options: dict[str, Any], script: list[str], body: dict[str, Any]) -> bytes:
    built = make_app(script=lambda req: list(script), **options)
    return masked(stream_raw(built.client(), messages=[{"role": "user", "content": "Go."}], **body), _MASK)


@pytest.mark.parametrize("name", list(CASES))
def test_fast_paths_frame_exactly_what_the_general_path_frames(make_app: Any, name: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    options, script, body = CASES[name]
    used: list[str] = []

    class Counting(chat_frames.ContentFrames):  # type: ignore[misc]
        def content(self, *args: Any) -> bytes:
            used.append("content")
            return super().content(*args)

        def arguments(self, *args: Any) -> bytes:
            used.append("arguments")
            return super().arguments(*args)

    monkeypatch.setattr(chat_frames, "ContentFrames", Counting)
    fast = _stream(make_app, options, script, body)
    fast_used = list(used)
    monkeypatch.setattr(chat_frames, "FAST_PATHS", False)
    general = _stream(make_app, options, script, body)
    assert fast == general
    assert len(used) == len(fast_used)  # the general run framed nothing through the fast paths
    if not body.get("logprobs") and name != "custom_tool":  # (logprobs: the general path only; a custom call: no text)
        assert "content" in fast_used
    if (body.get("tools") and body.get("tool_choice") != "none") or body.get("functions"):
        assert "arguments" in fast_used or body.get("functions") or name == "custom_tool"


@pytest.mark.parametrize(("name", "lane"), [("text", True), ("escapes", True), ("text_empty_chunks", True),
                                            ("text_tools_none", True), ("n2_usage", False), ("logprobs", False), ("tools", False),
                                            ("tools_per_char", False), ("text_reasoning", False)])
def test_unparsed_text_skips_the_per_chunk_update(make_app: Any, name: str, lane: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The text lane (``Run.text_updates``): one streamed choice with nothing to parse makes a
    ``ChoiceUpdate`` for its first delta and its finish only; any other stream makes one per chunk
    that sends something (a delta, logprobs, the end): a chunk of a call's head or of a marker makes
    none. With the fast paths off (``Run.updates``) every chunk makes one."""
    options, script, body = CASES[name]
    made = count_updates(monkeypatch)
    _stream(make_app, options, script, body)
    chunks = len(script) * body.get("n", 1)
    if lane:
        assert len(made) == 2  # (an empty chunk before the first delta sends nothing either)
    elif name in ("n2_usage", "logprobs"):  # (every chunk has text, or logprobs)
        assert len(made) == chunks
    else:  # (chunks inside a call's head or a marker send nothing)
        assert 0 < len(made) < chunks
    made.clear()
    monkeypatch.setattr(chat_frames, "FAST_PATHS", False)
    _stream(make_app, options, script, body)
    assert len(made) == chunks


def test_a_parsed_choice_sends_its_content_and_arguments_through_a_lane(make_app: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The parsed lane (``ParsedLane``): after a parsed choice's first content or arguments fragment, the
    next ones go out from the lane, and only what else the stream sends (a call's header, the finish)
    makes an update: the same few updates whatever the call's length, where the general path makes
    one per chunk that sends something."""
    made = count_updates(monkeypatch)
    counts = []
    for repeats in (4, 40):
        text = LONG.replace(PART * 12, PART * repeats)
        made.clear()
        raw = _stream(make_app, {}, _pieces(text, 2), {"tools": [WEATHER_TOOL]})
        counts.append(len(made))
        args = "".join(tc["function"].get("arguments") or "" for line in raw.decode().splitlines()
                       if line.startswith("data: {") for c in json.loads(line[6:])["choices"]
                       for tc in c["delta"].get("tool_calls") or [])
        assert json.loads(args) == {"city": "Lisbon é \\ " * repeats}
    assert counts[0] == counts[1] < 10
    made.clear()
    monkeypatch.setattr(chat_frames, "FAST_PATHS", False)
    _stream(make_app, {}, _pieces(text, 2), {"tools": [WEATHER_TOOL]})
    assert len(made) == len(_pieces(text, 2))


class _DiesInTheLane(list):
    """An engine script that kills its engine after the fifth piece: inside the text lane."""

    def __init__(self, engine: list[Any], pieces: list[str]) -> None:
        super().__init__(pieces)
        self.engine = engine

    def __iter__(self) -> Any:
        for i, piece in enumerate(list.__iter__(self)):
            if i == 5:
                self.engine[0].dead = True
            yield piece


@pytest.mark.parametrize("kind", ["text", "arguments"])
def test_an_engine_failure_inside_a_lane_ends_the_stream_as_anywhere(make_app: Any, kind: str) -> None:
    """The lane (a text lane, a parsed lane in a call's arguments) hands the engine's failure back to the
    run, which maps it as its own loop would: what was sent so far, one error event naming it,
    ``[DONE]``; the engine marked dead."""
    ref: list[Any] = []
    head = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "'
    script, body = ((list("abcdefgh"), {}) if kind == "text"
                    else ([head, *"abcdefgh", '"}}\n</tool_call>'], {"tools": [WEATHER_TOOL]}))
    built = make_app(script=lambda req: _DiesInTheLane(ref, script))
    ref.append(built.engine)
    raw = stream_raw(built.client(), messages=[{"role": "user", "content": "Go."}], max_tokens=80, **body)
    events = [line[6:] for line in raw.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["code"] == "engine_dead" and set(error) == {"message", "type", "param", "code"}
    deltas = [c["delta"] for e in events[:-2] for c in json.loads(e)["choices"]]
    if kind == "text":
        assert "".join(d.get("content") or "" for d in deltas) == "abcde"
    else:
        args = "".join(tc["function"].get("arguments") or "" for d in deltas for tc in d.get("tool_calls") or [])
        assert args == '{"city": "abcd' and not any(d.get("content") for d in deltas)
    assert built.state.engine_dead


@pytest.mark.parametrize("kind", ["text", "arguments"])
def test_a_client_leaving_inside_a_lane_aborts_its_request(make_app: Any, kind: str) -> None:
    """A disconnect while the response sends a lane's events (a text lane, a parsed lane in a call's
    arguments): the engine request is aborted, the disconnect counted, nothing left running, and the
    stream cut (no end of body)."""
    from server import metrics

    head = ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "'] if kind == "arguments" else []
    built = make_app(script=lambda req: [*head, *["x"] * 400], delay=0.002)
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "Go."}], "stream": True, "max_tokens": 500}
    if head:
        body["tools"] = [WEATHER_TOOL]
    raw = json.dumps(body).encode()

    async def run() -> list[dict[str, Any]]:
        gone = asyncio.Event()
        messages = [{"type": "http.request", "body": raw, "more_body": False}]
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if sum(m["type"] == "http.response.body" for m in sent) == 10:
                gone.set()  # the client leaves after ten events: the lane is running

        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/v1/chat/completions",
                 "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
                 "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 1),
                 "server": ("test", 80)}
        await asyncio.wait_for(built.app(scope, receive, send), 10)
        return sent

    before = metrics.CLIENT_DISCONNECTS._value.get()
    sent = asyncio.run(run())
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert 10 <= len(bodies) < 400 and not any(m.get("more_body") is False for m in bodies)
    assert built.engine.aborted == [built.engine.requests[0].request_id]
    assert metrics.CLIENT_DISCONNECTS._value.get() == before + 1
    assert not built.state.running and built.state.in_flight == 0


@pytest.mark.parametrize("kind", ["text", "arguments"])
def test_a_lane_counts_what_the_general_path_counts(make_app: Any, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Tokens (the usage, the completion-token counter) and one latency per token after the first,
    the same through a lane (a text lane, a parsed lane in a call's arguments) as through the general
    path; more chunks than one bulk observation holds."""
    from server import metrics
    from server.chat.generation import GenerationTimer

    script = ["x"] * (2 * GenerationTimer.ITL_BATCH + 5) + ["", "yy", ""]
    body: dict[str, Any] = {"stream_options": {"include_usage": True}}
    if kind == "arguments":
        script = ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "', *script, '"}}\n</tool_call>']
        body["tools"] = [WEATHER_TOOL]

    def counted() -> tuple[float, float, float, bytes]:
        itl = metrics.ITL.collect()[0]
        before = [s.value for s in itl.samples if s.name.endswith("_count")][0], metrics.COMPLETION_TOKENS._value.get()
        ttft = [s.value for s in metrics.TTFT.collect()[0].samples if s.name.endswith("_count")][0]
        raw = _stream(make_app, {}, script, body)
        after_itl = [s.value for s in metrics.ITL.collect()[0].samples if s.name.endswith("_count")][0]
        after_ttft = [s.value for s in metrics.TTFT.collect()[0].samples if s.name.endswith("_count")][0]
        return after_itl - before[0], metrics.COMPLETION_TOKENS._value.get() - before[1], after_ttft - ttft, raw

    lane = counted()
    monkeypatch.setattr(chat_frames, "FAST_PATHS", False)
    general = counted()
    tokens, timed = len("".join(script)), sum(1 for piece in script if piece)
    assert lane == general
    assert lane[:3] == (timed - 1, tokens, 1)  # one latency per chunk with tokens after the first (a TTFT)
    assert b'"completion_tokens":%d' % tokens in lane[3]
