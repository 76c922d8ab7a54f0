"""server/plan/response_frames.py: a streamed chunk that sends nothing (a call's head, a marker being
written) makes no update (``Run.updates(quiet=True)``), a message with nothing to parse takes the text
lane (``Run.text_updates``), and the Responses events are exactly those of an update per chunk: the
same requests are streamed with ``QUIET`` on and off and the SSE bodies compared byte for byte (only
the random ids and the creation time are masked)."""
from __future__ import annotations

import re
from typing import Any

import pytest

from server.plan import response_frames
from tests.unit._front import count_updates, streamed
from tests.unit._front import pieces as _pieces

WEATHER = {"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TIME = {"type": "function", "name": "get_time",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}
TRICKY = 'He said "hi"\n\t\\ \u2028 \U0001f600 </script> \x1f é'  # escapes the lane's framing must match
CALLS = ('Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par\\"is \u00e9"}}\n</tool_call>\n'
         '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>')
_MASK = [(re.compile(r'"(id|call_id|item_id|previous_response_id)":\s?"[^"]*"'), r'"\1":"X"'),
         (re.compile(r'"(created_at|completed_at)":\s?[\d.]+'), r'"\1":0')]


CASES: dict[str, tuple[dict[str, Any], list[str], dict[str, Any]]] = {
    # name: (make_app options, engine pieces, request body)
    "text": ({}, ["Hello", " world", "!"], {}),
    "tools": ({}, _pieces(CALLS, 3), {"tools": [WEATHER, TIME]}),
    "tools_per_char": ({}, list(CALLS), {"tools": [WEATHER, TIME], "tool_choice": "required"}),
    "reasoning_then_call": ({"reasoning_parser": "qwen3"}, _pieces("<think>Plan it</think>" + CALLS, 4),
                            {"tools": [WEATHER, TIME]}),
    "tools_repeat": ({}, _pieces("Sure. " + CALLS.split("<tool_call>", 1)[1].join(["<tool_call>"] * 3) + " more", 3),
                     {"tools": [WEATHER, TIME]}),  # (the guard ends the turn at the repeated call)
    "length": ({}, _pieces(CALLS, 4), {"tools": [WEATHER, TIME], "max_output_tokens": 60}),
    "escapes": ({}, _pieces(TRICKY, 4), {}),
    "empty_chunks": ({}, ["", "Hello", "", " world", "", "!"], {}),
    "length_text": ({}, _pieces(TRICKY * 3, 2), {"max_output_tokens": 9}),
    "long_call": ({}, _pieces('Sure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "' + "Lisbon é \\\\ " * 12
                              + '"}}\n</tool_call>' + CALLS, 2), {"tools": [WEATHER, TIME]}),  # prose, calls: parsed lanes
    "long_call_reasoning": ({"reasoning_parser": "qwen3"}, _pieces("<think>Plan " + TRICKY + "</think>" + TRICKY + CALLS, 3),
                            {"tools": [WEATHER, TIME]}),
}
TEXT = ("text", "escapes", "empty_chunks", "length_text")  # nothing to parse: the text lane runs


def _stream(make_app: Any, options: dict[str, Any], script: list[str], body: dict[str, Any]) -> bytes:
    return streamed(make_app(script=lambda req: list(script), **options).client(), "/v1/responses",
                    {"input": "Go.", **body}, _MASK)


@pytest.mark.parametrize("name", list(CASES))
def test_quiet_updates_frame_exactly_what_an_update_per_chunk_frames(make_app: Any, name: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    options, script, body = CASES[name]
    made = count_updates(monkeypatch)
    quiet = _stream(make_app, options, script, body)
    quiet_made = len(made)
    made.clear()
    monkeypatch.setattr(response_frames, "QUIET", False)  # (the text lane needs quiet updates: off too)
    every = _stream(make_app, options, script, body)
    assert quiet == every
    assert (b"event: response.incomplete" if name.startswith("length") else b"event: response.completed") in quiet
    if name not in ("tools_repeat", "length", "length_text"):  # (those end before the script does)
        assert len(made) == len(script)  # an update per chunk
    if name in TEXT:  # nothing to parse: the first delta and the finish, the text lane between
        assert quiet_made == 2 < len(made)
    else:  # chunks inside a call's head or a marker send nothing
        assert 0 < quiet_made < len(made)
    if name == "long_call":  # the prose's and the arguments' chunks after the first: parsed lanes (server/plan/lanes.py)
        assert quiet_made <= 10 < len(made) // 10


@pytest.mark.parametrize("kind", ["text", "arguments"])
def test_a_failure_inside_a_lane_closes_the_item_with_the_lanes_text(make_app: Any, kind: str) -> None:
    """A lane's frame keeps the open item's text (a message's, a function call's arguments) and the
    sequence numbers: an engine failure after several lane chunks closes the item as far as it got,
    every event numbered in order."""
    import json

    head = ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "'] if kind == "arguments" else []
    built = make_app(script=lambda req: [*head, *"abcdefgh"])
    original = built.engine.generate

    async def dies_after_five(req: Any) -> Any:
        k = 0
        async for c in original(req):
            yield c
            k += 1
            if k == 5 + len(head):
                built.engine.dead = True

    built.engine.generate = dies_after_five
    body: dict[str, Any] = {"stream": True, "input": "Go.", **({"tools": [WEATHER]} if head else {})}
    with built.client().stream("POST", "/v1/responses", json=body) as r:
        events = [json.loads(line[6:]) for line in "".join(r.iter_text()).splitlines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[-3:] == ["response.output_item.done", "error", "response.failed"], kinds
    item, output = events[-3]["item"], events[-1]["response"]["output"][0]
    if kind == "text":
        assert kinds.count("response.output_text.delta") == 5 and item["status"] == "incomplete"
        assert item["content"][0]["text"] == "abcde" and output["content"][0]["text"] == "abcde"
    else:  # (the call was cut: its item is incomplete, as the message's)
        assert item["status"] == "incomplete"
        assert kinds.count("response.function_call_arguments.delta") >= 5
        assert item["arguments"] == '{"city": "abcde' and output["arguments"] == item["arguments"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
