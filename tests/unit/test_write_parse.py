"""Every family writes the calls it parses: ``parser.write(calls)`` read back by the server's
message stream gives the same calls (and the text before them), non-streamed and under every
chunking of ``parser_contract.chunkings``, for calls drawn by hypothesis.

The values are what the XML and pythonic formats can carry: strings without the formats' own
markup characters and without whitespace at their ends (the templates put values on lines of
their own, and the parsers take that layout off), numbers, booleans, nested objects, arrays.
"""
from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.messages.message_stream import MessageStream
from server.messages.replay import tool_schemas
from tests.unit.parser_contract import check_agree, chunkings, run_nonstream, run_stream, same_text
from tool_parsers import TOOL_PARSERS, get_tool_parser

OPTS = {"type": "object", "properties": {"metric": {"type": "boolean"}, "limit": {"type": "integer"}}}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "lat": {"type": "number"}, "opts": OPTS,
        "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search_docs", "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "exact": {"type": "boolean"}}, "required": ["query"]}}},
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}},
]
SCHEMAS = tool_schemas(TOOLS)

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789éüßЖ中😀"
text = st.text(alphabet=_LETTERS + " .,-_'?!:;()/@#%&*+=", min_size=1, max_size=24).map(str.strip).filter(bool)
word = st.text(alphabet=_LETTERS, min_size=1, max_size=12)
integer = st.integers(min_value=-10**6, max_value=10**6)
number = st.integers(min_value=-10**6, max_value=10**6).map(lambda i: i / 8)  # exact in binary and in decimal


def _object(required: dict[str, Any], optional: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(required, optional=optional).map(dict)


ARGUMENTS = {
    "get_weather": _object({"city": text}, {"days": integer, "lat": number, "tags": st.lists(word, max_size=3),
                                            "opts": _object({}, {"metric": st.booleans(), "limit": integer})}),
    "search_docs": _object({"query": text}, {"exact": st.booleans()}),
    "ping": st.just({}),
}
calls = st.lists(st.sampled_from(sorted(ARGUMENTS)).flatmap(lambda n: ARGUMENTS[n].map(lambda a: (n, a))),
                 min_size=1, max_size=3)


def _read(final: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, json.loads(c.arguments)) for c in final.tool_calls]


@pytest.mark.parametrize("family", TOOL_PARSERS)
@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(calls=calls, prose=st.one_of(st.just(""), text))
def test_what_a_family_writes_it_reads_back(family: str, calls: list[tuple[str, dict[str, Any]]], prose: str) -> None:
    parser = get_tool_parser(family)
    lead = prose + " " if prose and parser.format.calls_follow_text and not parser.channels else ""
    written = lead + parser.write(calls)

    def make(**kw: Any) -> MessageStream:
        return MessageStream(tool_parser=parser, tool_names=tuple(SCHEMAS), tool_schemas=SCHEMAS, reasoning_parser=None,
                             **kw)

    whole = run_nonstream(make, written)
    assert _read(whole) == calls, written
    assert not whole.errors and not whole.unfinished, (written, whole.errors)
    assert same_text(whole.content, lead), (written, whole.content)
    for how, chunks in chunkings(written).items():
        streamed = run_stream(make, chunks)  # the deltas add up to the message (parser_contract)
        assert _read(streamed) == calls, (how, written)
        check_agree(streamed, whole)


@pytest.mark.parametrize("family", TOOL_PARSERS)
def test_call_indexes_and_sections_follow_the_template(family: str) -> None:
    """One section around parallel calls, indexes counting where the format numbers its calls."""
    parser = get_tool_parser(family)
    one, two = parser.write([("ping", {})]), parser.write([("ping", {}), ("ping", {})])
    f = parser.format
    assert one.startswith(f.section_begin) and one.endswith(f.section_end)
    assert two.count(f.section_begin or f.call_begin) == (1 if f.section_begin else 2)
    if family == "kimi_k2":
        assert "functions.ping:0" in two and "functions.ping:1" in two
    if family == "kimi_k3":
        assert 'index="1"' in two and 'index="2"' in two
