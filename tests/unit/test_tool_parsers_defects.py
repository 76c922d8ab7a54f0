"""The parser defect kinds of issue 28, as data (``tests/data/parsers/defects.json``): text
before ``<|python_tag|>``, several call objects in one block, a run of calls cut inside its
second call, and (the fourth kind) each of them with a chunk split inside a marker. Every
case runs non-streamed, under the usual chunkings, and split in two at every position
inside every marker, through MessageStream and the independent delta reconstructor."""
from __future__ import annotations

import json
from typing import Any

import pytest

from tests.testdata import VENDORED
from tests.unit.parser_contract import check_agree, chunkings, run_nonstream, run_stream, same_text
from tool_parsers import get_tool_parser
from tool_parsers.message_stream import FinalMessage, MessageStream

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


def _calls(final: FinalMessage) -> list[dict[str, Any]]:
    return [{"name": c.name, "arguments": json.loads(c.arguments)} for c in final.tool_calls]


@pytest.mark.parametrize("case", CASES, ids=[f"{c['parser']}/{c['id']}" for c in CASES])
def test_defect_case(case: dict[str, Any]) -> None:
    parser, text, expect = case["parser"], case["model_output"], case["expect"]

    def make(**kw: Any) -> MessageStream:
        return MessageStream(tool_parser=get_tool_parser(parser), reasoning_parser=None, **kw)

    whole = run_nonstream(make, text)
    assert _calls(whole) == expect["tool_calls"]
    assert same_text(whole.content, expect["content"]), (whole.content, expect["content"])
    splits = {**chunkings(text), **marker_splits(text, _markers(parser))}
    for name, chunks in splits.items():
        streamed = run_stream(make, chunks, markers=_markers(parser))
        if "stream_differs" in expect:  # the complete calls still come out, first
            got = [(c.name, c.arguments) for c in streamed.tool_calls][: len(whole.tool_calls)]
            assert got == [(c.name, c.arguments) for c in whole.tool_calls], name
        else:
            check_agree(streamed, whole)


def test_every_kind_covers_its_families() -> None:
    """Each defect kind has cases for every family it can occur in."""
    families = {kind: {c["parser"] for c in CASES if c["kind"] == kind} for kind in {c["kind"] for c in CASES}}
    mistral = {"mistral", "mistral_v11", "mistral_v13"}
    assert families["text_before_tag"] == {"llama3_json"}  # the only family whose calls may follow text unmarked
    assert families["two_objects_one_block"] == {"hermes", "llama3_json"} | mistral
    assert families["cut_in_second_call"] == {"hermes", "llama3_json"} | mistral
    assert any(marker_splits(c["model_output"], _markers(c["parser"])) for c in CASES if c["kind"] == "text_before_tag")
