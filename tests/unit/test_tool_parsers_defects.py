"""The parser defect kinds of issues 28 and 36, as data (``tests/data/parsers/defects.json``):
text before ``<|python_tag|>``, several call objects in one block, a run of calls cut inside its
second call, (the fourth kind) each of them with a chunk split inside a marker; a call that never
completes (the rule for an unfinished call, docs/tool_calling.md), DeepSeek's section opener
repeated, and Llama 3 call keys in any order. Every case runs non-streamed, under the usual
chunkings, and split in two at every position inside every marker, through MessageStream and the
independent delta reconstructor; all of them agree on content, reasoning, calls and finish_reason."""
from __future__ import annotations

import json
from typing import Any

import pytest

from reasoning_parsers import get_reasoning_parser
from tests.testdata import VENDORED
from tests.unit.family_cases import call_view
from tests.unit.parser_contract import check_agree, chunkings, run_nonstream, run_stream, same_text
from tool_parsers import get_tool_parser
from server.messages.message_stream import MessageStream
from server.messages.openai_message import finish_reason

CASES: list[dict[str, Any]] = json.loads((VENDORED / "parsers" / "defects.json").read_text())["cases"]
ARGS_MARKER = "[ARGS]"


def _markers(parser: str) -> tuple[str, ...]:
    p = get_tool_parser(parser)
    return tuple(m for m in (p.start, p.end) if m)


def marker_splits(text: str, markers: tuple[str, ...]) -> dict[str, list[str]]:
    """``text`` in two chunks, cut at every position strictly inside every marker occurrence."""
    cuts: dict[str, list[str]] = {}
    for marker in (*markers, ARGS_MARKER):
        at = text.find(marker)
        while at >= 0:
            for k in range(at + 1, at + len(marker)):
                cuts[f"split{k}"] = [text[:k], text[k:]]
            at = text.find(marker, at + 1)
    return cuts



@pytest.mark.parametrize("case", CASES, ids=[f"{c['parser']}/{c['id']}" for c in CASES])
def test_defect_case(case: dict[str, Any]) -> None:
    parser, text, expect = case["parser"], case["model_output"], case["expect"]

    tool_parser = get_tool_parser(parser)
    reasoning = case.get("reasoning_parser")

    def make(**kw: Any) -> MessageStream:
        thinking = get_reasoning_parser(reasoning, tool_start=(tool_parser.format.trigger,)) if reasoning else None
        return MessageStream(tool_parser=tool_parser, reasoning_parser=thinking, **kw)

    whole = run_nonstream(make, text)
    assert call_view(whole) == expect["tool_calls"], call_view(whole)
    assert same_text(whole.content, expect["content"]), (whole.content, expect["content"])
    if "reasoning" in expect:
        assert same_text(whole.reasoning, expect["reasoning"]), (whole.reasoning, expect["reasoning"])
    if "finish_reason" in expect:
        assert finish_reason(whole) == expect["finish_reason"]
    splits = {**chunkings(text), **marker_splits(text, _markers(parser))}
    for name, chunks in splits.items():
        streamed = run_stream(make, chunks, markers=_markers(parser))
        check_agree(streamed, whole)  # content, reasoning, calls and finish_reason, every split


def test_every_kind_covers_its_families() -> None:
    """Each defect kind has cases for every family it can occur in."""
    families = {kind: {c["parser"] for c in CASES if c["kind"] == kind} for kind in {c["kind"] for c in CASES}}
    mistral = {"mistral", "mistral_v11", "mistral_v13"}
    assert families["text_before_tag"] == {"llama3_json"}  # the only family whose calls may follow text unmarked
    assert families["two_objects_one_block"] == {"hermes", "llama3_json"} | mistral
    assert families["cut_in_second_call"] == {"hermes", "llama3_json"} | mistral
    # issue 36: every family it names for a call that never completes, and the other two kinds
    assert {"hermes", "qwen3_coder", "gpt_oss", "llama3_json", "mistral_v13"} <= families["unfinished_call"]
    assert families["repeated_section_opener"] == {"deepseek_v31"}
    assert families["key_order"] == {"llama3_json"}
    for case in CASES:  # each case names where it comes from (issue 28's file note covers its own)
        assert "source" in case or case["kind"] in ("text_before_tag", "two_objects_one_block", "cut_in_second_call")
    assert any(marker_splits(c["model_output"], _markers(c["parser"])) for c in CASES if c["kind"] == "text_before_tag")
