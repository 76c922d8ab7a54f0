"""The repeat guard: a call identical to an earlier one of the same turn ends the turn.

The duplicate is never returned or streamed (a later call to an already-called function is
held back until complete), the engine request is stopped, finish_reason is "tool_calls", and
``--allow-duplicate-tool-calls`` turns the guard off.
"""
from __future__ import annotations

import json
from typing import Any

import pytest

from server import metrics
from server.messages.message_stream import MessageStream
from server.config import Settings
from tool_parsers import get_tool_parser

P = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
Q = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
P_REORDERED = '<tool_call>\n{"name": "get_weather", "arguments": {"city":  "Paris"}}\n</tool_call>\n'
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def _stream(**kw: Any) -> MessageStream:
    return MessageStream(tool_parser=get_tool_parser("hermes"), reasoning_parser=None, **kw)


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize("streaming", [True, False])
def test_duplicate_ends_the_turn(streaming: bool) -> None:
    s = _stream(streaming=streaming, guard_repeats=True)
    sent_names: list[str] = []
    for piece in _pieces(P + Q + P_REORDERED + P + "more text"):
        delta = s.feed(piece)
        sent_names += [tc.name for tc in (delta.tool_calls if delta else ()) if tc.name]
    s.finish()
    final = s.final_message()
    assert [json.loads(c.arguments) for c in final.tool_calls] == [{"city": "Paris"}, {"city": "Oslo"}]
    assert final.content is None and len(final.repeated) == 1 and "repeats" in final.repeated[0]
    if streaming:
        assert sent_names == ["get_weather", "get_weather"]  # the duplicate's header never went out


@pytest.mark.parametrize(("first", "again"), [
    ({"a": 1, "b": [1, {"c": None}]}, '{"b": [1.0, {"c": null}], "a": 1}'),  # key order, 1 == 1.0
    ({"s": "x"}, '{"s": "x"}'),
])
def test_a_repeat_is_found_among_hundreds_of_settled_calls(first: dict[str, Any], again: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The settled calls are recorded once as they settle (not compared again every token): a
    repeat of the first of 300 calls is still found, equal as parsed JSON is equal."""
    hermes = get_tool_parser("hermes")
    s = _stream(guard_repeats=True)
    s.feed(hermes.write([("f", first)]) + "\n")
    for k in range(299):
        for piece in _pieces(hermes.write([("f", {"k": k})]) + "\n"):
            s.feed(piece)
    checks = 0
    check = s._repeats._check

    def counted(*args: Any) -> str | None:
        nonlocal checks
        checks += 1
        return check(*args)

    monkeypatch.setattr(s._repeats, "_check", counted)
    pieces = _pieces(hermes.write([("f", {"k": -1})]) + "\n")
    for piece in pieces:
        s.feed(piece)
    assert checks <= 12 * len(pieces), (checks, len(pieces))  # the calls after the checkpoint, not all 300, each feed
    s.feed('<tool_call>\n{"name": "f", "arguments": ' + again + "}\n</tool_call>\nmore")
    s.finish()
    final = s.final_message()
    assert len(final.tool_calls) == 301 and len(final.repeated) == 1 and "tool call 301" in final.repeated[0]


def test_second_call_to_a_function_is_held_until_complete() -> None:
    s = _stream(guard_repeats=True)
    s.feed(P)
    partial = Q[: Q.index("Oslo") + 2]
    delta = s.feed(partial[len(""):])
    assert delta is None or not delta.tool_calls  # could still become a repeat: nothing sent
    delta = s.feed(Q[len(partial):])
    assert delta is not None and [tc.name for tc in delta.tool_calls if tc.name] == ["get_weather"]


def test_guard_off_returns_duplicates() -> None:
    s = _stream(guard_repeats=False, streaming=False)
    s.finish(P + P)
    assert len(s.final_message().tool_calls) == 2 and s.repeat is None


def _dupes(built: Any) -> float:
    return metrics.TOOL_CALLS.labels("hermes", "duplicate")._value.get()


@pytest.mark.parametrize("stream", [False, True])
def test_server_stops_the_engine_at_a_repeat(make_app: Any, stream: bool) -> None:
    built = make_app(script=lambda req: _pieces(P + P + P + P, 5), delay=0.001)
    before = _dupes(built)
    r = built.client().post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER], "tool_choice": "required",
        "max_tokens": 1000, "stream": stream})
    assert r.status_code == 200
    if stream:
        events = [json.loads(x[6:]) for x in r.text.splitlines() if x.startswith("data: {")]
        headers = [tc for e in events for ch in e["choices"] for tc in ch["delta"].get("tool_calls") or []
                   if tc.get("id")]
        finishes = [ch["finish_reason"] for e in events for ch in e["choices"] if ch["finish_reason"]]
        assert len(headers) == 1 and finishes == ["tool_calls"] and r.text.rstrip().endswith("[DONE]")
    else:
        choice = r.json()["choices"][0]
        assert len(choice["message"]["tool_calls"]) == 1 and choice["finish_reason"] == "tool_calls"
    assert built.engine.aborted, "the engine request is stopped at the repeat"
    assert _dupes(built) == before + 1
    assert built.state.in_flight == 0 and not built.state.running


@pytest.mark.parametrize("stream", [False, True])
def test_a_failed_abort_after_a_repeat_leaves_the_answer_whole(make_app: Any, stream: bool, caplog: Any) -> None:
    """The answer ended at the repeat is complete: an engine that then fails to stop the request
    is logged, and the client still gets the call and (streamed) nothing after ``[DONE]``."""
    built = make_app(script=lambda req: _pieces(P + P + P + P, 5), delay=0.001)

    async def broken_abort(request_id: str) -> None:
        raise RuntimeError("the engine could not abort")

    built.engine.abort = broken_abort
    r = built.client().post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER], "tool_choice": "required",
        "max_tokens": 1000, "stream": stream})
    assert r.status_code == 200
    if stream:
        assert r.text.rstrip().endswith("data: [DONE]") and '"error"' not in r.text
        finishes = [ch["finish_reason"] for x in r.text.splitlines() if x.startswith("data: {")
                    for ch in json.loads(x[6:])["choices"] if ch["finish_reason"]]
        assert finishes == ["tool_calls"]
    else:
        choice = r.json()["choices"][0]
        assert len(choice["message"]["tool_calls"]) == 1 and choice["finish_reason"] == "tool_calls"
    assert any("not stopped after a repeated call" in rec.getMessage() for rec in caplog.records)
    assert built.state.in_flight == 0


def test_flag_allows_duplicates(make_app: Any) -> None:
    built = make_app(script=lambda req: [P, P], settings=Settings(allow_duplicate_tool_calls=True))
    r = built.client().post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER], "max_tokens": 1000})
    assert len(r.json()["choices"][0]["message"]["tool_calls"]) == 2
