"""A streamed call whose name went out but no argument text did still ends as ``{}``.

No built-in parser sends a name before its arguments begin, so a stub parser that does (a
call cut right after its name) drives ``MessageStream.finish``'s closing path.
"""
from __future__ import annotations

from tool_parsers.base import ParsedTools, ToolCallPart, ToolParser
from server.messages.message_stream import MessageStream


class _NameFirst(ToolParser):
    name = "name_first_stub"
    start, end = "CALL", ""

    def parse(self, text: str, *, final: bool, resume: str | None = None) -> ParsedTools:
        if "CALL f" in text:
            return ParsedTools("", (ToolCallPart("f", "", final),))
        return ParsedTools(text)


def test_a_call_with_no_argument_text_closes_as_empty_object() -> None:
    stream = MessageStream(tool_parser=_NameFirst(), reasoning_parser=None, tool_names=["f"])
    deltas = [stream.feed("CALL f"), stream.feed(" "), stream.finish()]
    parts = [p for d in deltas if d is not None for p in d.tool_calls]
    assert [p.name for p in parts if p.name] == ["f"]
    assert "".join(p.arguments or "" for p in parts) == "{}"  # the deltas add up to the final call
    final = stream.final_message()
    assert [(c.name, c.arguments) for c in final.tool_calls] == [("f", "{}")]
