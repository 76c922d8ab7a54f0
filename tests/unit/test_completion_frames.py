"""server/plan/completion_frames.py: a streamed completion's text lane (``Run.text_updates``: one prompt,
one choice, nothing to parse) frames exactly what the general path frames, for every kind of
completions stream: the same requests are streamed with ``FAST_PATHS`` on and off and the SSE bodies
compared byte for byte (the random ids and the creation time masked)."""
from __future__ import annotations

import re
from typing import Any

import pytest

from server.plan import completion_frames
from tests.unit._front import count_updates, streamed
from tests.unit._front import pieces as _pieces

TRICKY = 'He said "hi"\n\t\\ \u2028 \U0001f600 </script> \x1f é'  # escapes the fast framing must match
ANSWER = '{"a":1}'
STRICT = {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {
    "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}}}
_MASK = [(re.compile(r"cmpl-[0-9a-f]+"), "cmpl-X"), (re.compile(r'"created":\s?\d+'), '"created":0')]

CASES: dict[str, tuple[list[str], dict[str, Any], bool]] = {
    # name: (engine pieces, request body, whether the lane runs)
    "text": (["Hello", " world", "!"], {}, True),
    "escapes": (_pieces(TRICKY, 3), {"stream_options": {"include_usage": True}}, True),
    "empty_chunks": (["", "Hello", "", " world", "", "!", ""], {}, True),  # (sent as empty texts, as before)
    "length": (_pieces(TRICKY * 3, 2), {"max_tokens": 7}, True),
    "echo": (["Hello", " world", "!"], {"echo": True}, True),
    "closed_by_budget": (list(ANSWER) + ["zzz"], {"response_format": STRICT, "max_tokens": len(ANSWER)}, True),
    "n2": (_pieces(TRICKY, 4), {"n": 2, "stream_options": {"include_usage": True}}, False),
    "two_prompts": (["Hello", " world"], {"prompt": ["Hi", "Bye"]}, False),
    "logprobs": (["Hi", " there"], {"logprobs": 2}, False),
}


def _stream(make_app: Any, script: list[str], body: dict[str, Any]) -> bytes:
    return streamed(make_app(script=lambda req: list(script)).client(), "/v1/completions", {"prompt": "Go.", **body}, _MASK)


@pytest.mark.parametrize("name", list(CASES))
def test_the_lane_frames_exactly_what_the_general_path_frames(make_app: Any, name: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    script, body, lane = CASES[name]
    made = count_updates(monkeypatch)
    fast = _stream(make_app, script, body)
    through_lane = len(made)
    made.clear()
    monkeypatch.setattr(completion_frames, "FAST_PATHS", False)
    general = _stream(make_app, script, body)
    assert fast == general
    chunks = len(made)  # the general path: one update per chunk
    assert (through_lane == 2 < chunks) if lane else through_lane == chunks  # the first update and the finish
    if name == "closed_by_budget":  # the lane kept the text the budget check reads at the finish
        assert b'"finish_reason":"length","closed_by_budget":true' in fast


def test_an_engine_failure_inside_the_lane_ends_the_stream_with_its_error(make_app: Any) -> None:
    import json

    built: list[Any] = []

    class Dies(list):  # the engine dies after the fourth piece: inside the lane
        def __iter__(self) -> Any:
            for i, piece in enumerate(list.__iter__(self)):
                if i == 4:
                    built[0].engine.dead = True
                yield piece

    built.append(make_app(script=lambda req: Dies(list("abcdefgh"))))
    with built[0].client().stream("POST", "/v1/completions", json={"prompt": "Go.", "stream": True}) as r:
        lines = [line[6:] for line in "".join(r.iter_text()).splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]" and json.loads(lines[-2])["error"]["code"] == "engine_dead"
    assert "".join(json.loads(x)["choices"][0]["text"] for x in lines[:-2]) == "abcd"
    assert built[0].state.engine_dead
