"""GLM-4.5 / 4.6 / 4.7 tool calls (vLLM's ``glm45`` and ``glm47``).

Format (GLM-4.5's chat template; GLM-4.7 writes the same without the newlines)::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    <arg_key>days</arg_key>
    <arg_value>3</arg_value>
    </tool_call>

Arguments are text typed by the tool's schema (:mod:`tool_parsers._xml_args`, shared with
qwen3_coder): the parser is bound to the request's tools and returns OpenAI JSON that only grows
while streaming (a string value as it is written, other values when their ``</arg_value>``
arrives). A ``<tool_call>`` followed by ``{`` is a hermes-style call, which GLM does not write:
its text is content. The grammar is XGrammar's ``glm_xml`` argument style (both layouts).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from ._blocks import BlockToolParser
from ._scan import JsonError, skip_ws
from ._xml_args import SchemaBound, XmlTags, xml_call, xml_text
from .base import CallFormat, JsonValue, ModelFamily, ToolCallPart

__all__ = ["Glm45ToolParser", "FAMILIES"]

_KEY = "<arg_key>"
_TAGS = XmlTags(key_open=_KEY, key_close="</arg_key>", value_open="<arg_value>", value_close="</arg_value>",
                call_close="</tool_call>")
_NAME_STOP = re.compile(r"\n|<arg_key>|</tool_call>")
_BAD_NAME = re.compile(r"[<>{}\[\]\"]")


class Glm45ToolParser(SchemaBound, BlockToolParser):
    """``<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>`` blocks."""

    name: ClassVar[str] = "glm45"
    start: ClassVar[str] = "<tool_call>"
    end: ClassVar[str] = "</tool_call>"
    format: ClassVar[CallFormat] = CallFormat(
        trigger="<tool_call>", section_begin="", call_begin="<tool_call>", name_end="", call_end="</tool_call>",
        separator="\n", section_end="", arguments_style="glm_xml")

    def write_arguments(self, arguments: Mapping[str, JsonValue]) -> str:
        """``<arg_key>``/``<arg_value>`` pairs, each on a line of its own (GLM-4.5's template)."""
        return "".join(f"\n{_KEY}{k}</arg_key>\n<arg_value>{xml_text(v)}</arg_value>" for k, v in arguments.items()) + "\n"

    def _block(self, text: str, body: int, *, final: bool, errors: list[str]) -> tuple[list[ToolCallPart], int | None]:
        p = skip_ws(text, body)
        stop = _NAME_STOP.search(text, p)
        q = stop.start() if stop else len(text)
        bad = _BAD_NAME.search(text, p, q)
        if bad is not None and not (stop is None and not final and _maybe_stop(text[bad.start():])):
            raise JsonError("expected a function name", bad.start())
        if stop is None:
            if final:
                raise JsonError("the text ends inside the function name", len(text))
            return [ToolCallPart(None, "", False)], None
        name = text[p:q].strip()
        if not name:
            raise JsonError("empty function name", p)
        call, end = xml_call(text, q, name, self._schemas.get(name), _TAGS, final=final)
        return [call], end


def _maybe_stop(tail: str) -> bool:
    """Whether ``tail`` may still become the start of what ends a name."""
    return any(m.startswith(tail) for m in (_KEY, _TAGS.call_close))


def _detect(template: str) -> bool:
    return "<arg_key>" in template and "<tool_call>" in template


_GLM45_WRITES = ("`<tool_call>f\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n</tool_call>` (GLM-4.7 without "
                 "the newlines); each value typed by the tool's schema and returned as JSON, streamed as "
                 "qwen3_coder's; a `<tool_call>` holding JSON is text")

FAMILIES = (
    ModelFamily(name="glm45", reasoning="glm45", parser=Glm45ToolParser(), detect=_detect, detect_order=6,
                models="GLM-4.5, 4.6, 4.7",
                writes=_GLM45_WRITES,
                detects="`<arg_key>` with `<tool_call>`"),
    # vLLM's name for GLM-4.7's parser; the same format (the grammar allows both layouts)
    ModelFamily(name="glm47", reasoning="glm45", parser=Glm45ToolParser(name="glm47"), detect=lambda t: False, detect_order=7,
                doc_row="glm45"),
)
