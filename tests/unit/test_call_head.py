"""server/messages/call_head.py: where a call's head, as its family writes it, still holds the text."""
from __future__ import annotations

import json
from typing import Any

import pytest

from server.messages.call_head import CallHead, call_head, grammar_heads
from tool_parsers import TOOL_PARSERS, get_tool_parser

_HERMES = get_tool_parser("hermes")
_INERT = _HERMES.held_inert


def test_the_head_holds_prefixes_of_call_begin_and_a_name_being_written() -> None:
    head = call_head(_HERMES, 6)
    assert head == CallHead(6, '<tool_call>\n{"name": "', '", "arguments": ')
    prose = "Sure. "
    for end in range(len(head.text) + 1):
        assert head.holds(prose + head.text[:end], _INERT)
    assert head.holds(prose + head.text + "get_weath", _INERT)  # the name, being written
    assert not head.holds(prose + head.text + 'get_weather"', _INERT)  # a quote may end the name: parse
    assert not head.holds(prose + head.text + "get-weather", _INERT)  # not the family's inert chunk
    assert not head.holds(prose + '<tool_call>\n{"arguments"', _INERT)  # another key order
    assert not head.holds(prose + '<tool_call> {"name"', _INERT)  # other spacing
    assert not head.holds(prose + head.text + "f", None)  # no inert pattern: every name chunk is parsed


def test_a_named_head_holds_until_the_arguments_begin() -> None:
    tail = 'x<tool_call>\n{"name": "f"'
    named = call_head(_HERMES, 1).with_name(tail, "f")
    assert named is not None and named.text == '<tool_call>\n{"name": "f", "arguments": ' and named.named
    assert named.holds(tail + ', "argu', _INERT) and named.holds(tail + ', "arguments": ', _INERT)
    assert not named.holds(tail + ', "arguments": {', _INERT)  # the arguments begin: parse
    assert not named.holds(tail + ', "arguments": ' + "a", _INERT)  # (no name being written any more)
    assert named.with_name(tail + "}", "f") is named  # named once: a later parse keeps it
    assert call_head(_HERMES, 1).with_name('x<tool_call>\n{"name":"f"', "f") is None  # written otherwise


def test_a_head_moves_with_the_settled_text() -> None:
    head = CallHead(10, "<a>", ">")
    assert head.shifted(4) == CallHead(6, "<a>", ">")
    assert head.shifted(11) is None  # (the head itself was settled: none)


def test_only_families_whose_calls_begin_at_their_marker_have_heads() -> None:
    assert call_head(get_tool_parser("longcat"), 0) is not None
    for name in ("llama3_json", "kimi_k2", "deepseek_v3"):  # a section before the call, or no start marker
        assert call_head(get_tool_parser(name), 0) is None, name


def test_a_name_is_forced_once_the_head_written_fits_one_of_the_grammars_names() -> None:
    heads = grammar_heads(_HERMES, ["get_weather", "get_time", "get"])
    assert dict(heads)["get"] == '<tool_call>\n{"name": "get", "arguments": '
    head = call_head(_HERMES, 2)
    assert head is not None
    for written in ("", "<tool_", '<tool_call>\n{"name": "', '<tool_call>\n{"name": "get'):
        assert head.forced_name("x " + written, heads) is None  # two or more names still fit
    name, named = head.forced_name('x <tool_call>\n{"name": "get_w', heads)  # type: ignore[misc]
    assert name == "get_weather" and named == CallHead(2, dict(heads)["get_weather"], '", "arguments": ', True)
    assert named.holds('x <tool_call>\n{"name": "get_weather", "argu', _INERT)  # no parse till the arguments
    assert head.forced_name('x <tool_call>\n{"name": "get"', heads)[0] == "get"  # type: ignore[index]
    assert head.forced_name('x <tool_call>\n{"name": "get", "arguments": {', heads)[0] == "get"  # type: ignore[index]
    assert head.forced_name('x <tool_call>\n{"name": "set', heads) is None  # not the grammar's text: the parse names it
    assert named.forced_name('x <tool_call>\n{"name": "get_w', heads) is None  # named already
    one = grammar_heads(_HERMES, ["get_weather"])
    assert head.forced_name("x <tool_call>", one)[0] == "get_weather"  # type: ignore[index]  # one tool: at the marker


def test_only_families_whose_grammar_is_their_pieces_name_calls_from_the_head() -> None:
    """Harmony (several ways to begin a call) and families without a head name calls by their parse."""
    assert grammar_heads(get_tool_parser("openai"), ["f"]) == () == grammar_heads(get_tool_parser("gpt_oss"), ["f"])
    assert grammar_heads(get_tool_parser("kimi_k2"), ["f"]) == () == grammar_heads(get_tool_parser("llama3_json"), ["f"])
    assert grammar_heads(_HERMES, ['a"b']) == (('a"b', '<tool_call>\n{"name": "a\\"b", "arguments": '),)  # escaped


def _grammar_takes(parser: str, tools: list[dict[str, Any]], text: str, choice: Any) -> bool:
    """Whether the server's tool grammar for ``parser`` lets a model begin its output with ``text``."""
    import xgrammar as xgr

    from server.structured.constraints import constraint_from_request
    from server.structured.tools import tool_spec_of

    constraint = constraint_from_request(response_format=None, structured_outputs=None,
                                         tools=tool_spec_of(tools, choice), tool_format=parser)
    assert constraint is not None
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_structural_tag(json.dumps(constraint.value))
    return bool(xgr.GrammarMatcher(compiled).accept_string(text))


@pytest.mark.parametrize("parser", [n for n in sorted(TOOL_PARSERS) if grammar_heads(get_tool_parser(n), ["f"])])
def test_the_grammar_writes_a_calls_head_as_grammar_heads_says(parser: str) -> None:
    """What lets a name go out before it is whole: after a call's start marker the family's grammar takes
    only the head of one of the names it allows, written as ``CallFormat.head`` (no other spelling, no
    other name, nothing but ``name_end`` after it), under every tool_choice that constrains calls."""
    p = get_tool_parser(parser)
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
             for n in ("get_weather", "get_time")]
    named = {"type": "function", "function": {"name": "get_time"}}
    for choice, names in (("auto", ["get_weather", "get_time"]), ("required", ["get_weather", "get_time"]),
                          (named, ["get_time"])):
        heads = dict(grammar_heads(p, names))
        before = "Sure. " if choice == "auto" and p.format.calls_follow_text else ""
        for name in ("get_weather", "get_time"):
            assert _grammar_takes(parser, tools, before + p.format.head(name), choice) is (name in heads), (choice, name)
        begin = before + p.format.call_begin
        assert not _grammar_takes(parser, tools, begin + "x", choice)  # no tool's name
        assert not _grammar_takes(parser, tools, begin + "get_timeX", choice)  # the name ends with name_end
        assert not _grammar_takes(parser, tools, begin + " get_time", choice)  # no other spelling
