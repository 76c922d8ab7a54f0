"""The hooks a family owns its format through (``tool_parsers/base.py``): the arguments'
style and its own structural tag (read by ``server/structured/constraints.py``), and a
parser bound to the request's tool schemas (``MessageStream(tool_schemas=...)``, replay)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from server.structured.constraints import tool_call_format
from tool_parsers.base import CallFormat, ParsedTools, ToolCallPart, ToolParser
from server.messages.message_stream import MessageStream

WEATHER = ("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


def test_arguments_style_reaches_the_structural_tag() -> None:
    xml = CallFormat(trigger="<c>", section_begin="", call_begin="<c>", name_end=">", call_end="</c>",
                     separator="", section_end="", arguments_style="qwen_xml")
    fmt = tool_call_format(xml, [WEATHER], mode="required", parallel=False)
    args = fmt["elements"][1]
    assert args["type"] == "json_schema" and args["style"] == "qwen_xml"
    plain = tool_call_format(CallFormat(**{**xml.__dict__, "arguments_style": "json"}), [WEATHER],
                             mode="required", parallel=False)
    assert "style" not in plain["elements"][1]  # the JSON default is written as before


@dataclass(frozen=True)
class _OwnFormat(CallFormat):
    def structural_tag(self, tools: list[tuple[str, Any]], *, mode: Literal["auto", "required"], parallel: bool,
                       arguments: Any) -> dict[str, Any] | None:
        styled = arguments(tools[0][1])["type"]  # the builder's own arguments format, offered to the family
        return {"type": "const_string", "value": f"{mode}:{parallel}:{','.join(n for n, _ in tools)}:{styled}"}


def test_a_family_structural_tag_replaces_the_assembled_one() -> None:
    own = _OwnFormat(trigger="<c>", section_begin="", call_begin="<c>", name_end=">", call_end="</c>",
                     separator="", section_end="")
    assert tool_call_format(own, [WEATHER], mode="auto", parallel=True) == {
        "type": "const_string", "value": "auto:True:get_weather:json_schema"}


class _Upper(ToolParser):
    """``NAME:VALUE`` -> one call whose single parameter (named by the bound schema) is VALUE upper-cased:
    arguments that are converted, not the model's text."""

    name: ClassVar[str] = "upper"
    start: ClassVar[str] = ""
    end: ClassVar[str] = ""
    format: ClassVar[CallFormat] = CallFormat(trigger="", section_begin="", call_begin="", name_end=":",
                                              call_end="", separator="", section_end="")
    raw_arguments: ClassVar[bool] = False

    def __init__(self, schemas: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.schemas = schemas or {}

    def with_tools(self, tools: Any) -> ToolParser:
        return _Upper(dict(tools))

    def parse(self, text: str, *, final: bool, resume: str | None = None) -> ParsedTools:
        name, _, value = text.partition(":")
        if not _ or name not in self.schemas:
            return ParsedTools("")
        key = next(iter(self.schemas[name]["properties"]))
        body = '{"' + key + '": ' + json.dumps(value.upper())[:-1]  # an open string while not final
        return ParsedTools("", (ToolCallPart(name, body + '"}' if final else body, final),))


def test_the_stream_binds_the_parser_to_the_schemas_and_skips_the_raw_text_fast_path() -> None:
    stream = MessageStream(tool_parser=_Upper(), reasoning_parser=None, tool_names=["get_weather"],
                           tool_schemas={"get_weather": WEATHER[1]})
    sent = ""
    for piece in ["get_weather:", "Pa", "ris", " x"]:
        delta = stream.feed(piece)
        sent += "".join(d.arguments for d in (delta.tool_calls if delta else ()))
    delta = stream.finish()
    sent += "".join(d.arguments for d in (delta.tool_calls if delta else ()))
    final = stream.final_message()
    assert [(c.name, json.loads(c.arguments)) for c in final.tool_calls] == [("get_weather", {"city": "PARIS X"})]
    assert sent == final.tool_calls[0].arguments  # the deltas are the converted JSON, not the raw text
