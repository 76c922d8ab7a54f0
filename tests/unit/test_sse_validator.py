"""The SSE validator accepts every recorded OpenAI stream and rejects broken ones."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.testdata import testdata
from tests.sse_validator import StreamProblem, validate_sse

RECORDED = sorted(testdata("openai_sse").glob("*.sse"))
assert len(RECORDED) >= 12, "the recorded OpenAI streams are vendored in tests/data/openai_sse"


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
def test_recorded_openai_streams_validate(path: Path) -> None:
    raw = path.read_text()
    r = validate_sse(raw)
    assert r.id.startswith("chatcmpl-")
    assert r.finish_reason, "every recorded stream finishes"
    if path.stem == "n3_choices":
        assert sorted(r.finish_reason) == [0, 1, 2]
    if path.stem == "two_parallel_tool_calls":
        calls = r.tool_calls[0]
        assert len(calls) == 2 and all(json.loads(c["arguments"]) for c in calls.values())


def _frames(objs: list[dict]) -> str:
    return "".join(f"data: {json.dumps(o)}\n\n" for o in objs) + "data: [DONE]\n\n"


def _c(delta: dict, finish=None, id="chatcmpl-1", index=0) -> dict:
    return {"id": id, "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


def test_rejects_missing_done() -> None:
    with pytest.raises(StreamProblem, match="DONE"):
        validate_sse(f"data: {json.dumps(_c({'role': 'assistant'}))}\n\n")


def test_rejects_changing_id() -> None:
    with pytest.raises(StreamProblem, match="same id"):
        validate_sse(_frames([_c({"role": "assistant"}), _c({"content": "x"}, id="chatcmpl-2")]))


def test_rejects_first_delta_without_role() -> None:
    with pytest.raises(StreamProblem, match="role"):
        validate_sse(_frames([_c({"content": "x"})]))


def test_rejects_tool_name_repeated_and_finish_mismatch() -> None:
    first = {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                  "function": {"name": "f", "arguments": ""}}]}
    again = {"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{}"}}]}
    with pytest.raises(StreamProblem, match="only argument fragments"):
        validate_sse(_frames([_c(first), _c(again)]))
    with pytest.raises(StreamProblem, match="finish_reason"):
        validate_sse(_frames([_c(first), _c({}, finish="stop")]))


def test_rejects_usage_chunk_with_choices() -> None:
    bad = _c({"role": "assistant"})
    bad["usage"] = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    with pytest.raises(StreamProblem, match="choices"):
        validate_sse(_frames([bad]))
