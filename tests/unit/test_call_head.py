"""server/messages/call_head.py: where a call's head, as its family writes it, still holds the text."""
from __future__ import annotations

from server.messages.call_head import CallHead, call_head
from tool_parsers import get_tool_parser

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
