"""Qwen3-Coder / Qwen3.5 XML tool calls (vLLM's ``qwen3_coder`` / ``qwen3_xml``).

Format (Qwen3-Coder's chat template)::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

Arguments are text typed by the tool's schema (:mod:`tool_parsers._xml_args`): the parser is
bound to the request's tools (:meth:`with_tools`) and returns them as OpenAI JSON
(``{"city": "Paris", "days": 3}``) that only grows while streaming: a string parameter streams
as it is written, other values when their ``</parameter>`` arrives. One newline after
``<parameter=k>`` and one before ``</parameter>`` are layout, as in the template.

A ``<tool_call>`` not followed by ``<function=`` is text (a model writing about the tag in
prose), not a call. A call that breaks (no name, text that is no parameter, the text ending
inside it at the final parse) is content up to its ``</tool_call>``, and ``errors`` says why.
The grammar (XGrammar's ``qwen_xml`` argument style) makes the model write exactly this.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from ._blocks import BlockToolParser
from ._scan import JsonError, skip_ws
from ._xml_args import SchemaBound, XmlTags, xml_call, xml_text
from .base import CallFormat, JsonValue, ModelFamily, ToolCallPart

__all__ = ["Qwen3CoderToolParser", "FAMILIES"]

_FUNCTION, _FUNCTION_END = "<function=", "</function>"
_PARAM, _PARAM_END = "<parameter=", "</parameter>"
_BAD_NAME = re.compile(r"[<>\n]")


class Qwen3CoderToolParser(SchemaBound, BlockToolParser):
    """``<tool_call><function=f><parameter=k>v</parameter></function></tool_call>`` blocks."""

    name: ClassVar[str] = "qwen3_coder"
    start: ClassVar[str] = "<tool_call>"
    end: ClassVar[str] = "</tool_call>"
    format: ClassVar[CallFormat] = CallFormat(
        trigger="<tool_call>\n<function=", section_begin="", call_begin="<tool_call>\n<function=", name_end=">",
        call_end="</function>\n</tool_call>", separator="\n", section_end="", arguments_style="qwen_xml")

    def write_arguments(self, arguments: Mapping[str, JsonValue]) -> str:
        """A ``<parameter=k>`` element per argument, its value on lines of its own (the template's layout)."""
        return "\n" + "".join(f"{_PARAM}{k}>\n{xml_text(v)}\n{_PARAM_END}\n" for k, v in arguments.items())

    def _opens_call(self, text: str, body: int, *, final: bool) -> bool | None:
        """A ``<tool_call>`` not followed by ``<function=`` is prose."""
        p = skip_ws(text, body)
        if text.startswith(_FUNCTION, p):
            return True
        return None if not final and _FUNCTION.startswith(text[p:]) else False

    def _block(self, text: str, body: int, *, final: bool, errors: list[str]) -> tuple[list[ToolCallPart], int | None]:
        call, end = self._call(text, skip_ws(text, body) + len(_FUNCTION), final=final)
        return [call], end

    def _call(self, text: str, p: int, *, final: bool) -> tuple[ToolCallPart, int | None]:
        """The call whose name starts at ``p`` and where it ends (None: cut off while streaming)."""
        q = _name_end(text, p, final=final, what="function name")
        if q is None:
            return ToolCallPart(None, "", False), None
        name = text[p:q]
        call, r = xml_call(text, q + 1, name, self._schemas.get(name), _TAGS, final=final)
        if r is None:
            return call, None
        e = skip_ws(text, r)
        if text.startswith(self.end, e):
            return call, e + len(self.end)
        if not final and self.end.startswith(text[e:]):
            return call, None  # the closing marker is still to come
        return call, r  # no </tool_call>: the call still ends


def _name_end(text: str, p: int, *, final: bool, what: str) -> int | None:
    """Where the name at ``p`` ends (its ``>``); None: cut off while streaming."""
    q = text.find(">", p)
    bad = _BAD_NAME.search(text, p, len(text) if q < 0 else q)
    if bad is not None:
        raise JsonError(f"expected a {what} ending in '>'", bad.start())
    if q < 0:
        if final:
            raise JsonError(f"the text ends inside the {what}", len(text))
        return None
    if q == p:
        raise JsonError(f"empty {what}", p)
    return q


def _layout(raw: str) -> str:
    """A value without the template's newline after its opening tag and before its closing one
    (while the value is open, a last newline is held back: it may be that layout)."""
    raw = raw[1:] if raw.startswith("\n") else raw
    return raw[:-1] if raw.endswith("\n") else raw


_TAGS = XmlTags(key_open=_PARAM, key_close=">", value_open="", value_close=_PARAM_END, call_close=_FUNCTION_END,
                layout=_layout)


def _detect(template: str) -> bool:
    return "<function=" in template and "<parameter=" in template


_QWEN3_CODER_WRITES = ("`<tool_call>\\n<function=f>\\n<parameter=k>\\nv\\n</parameter>\\n</function>\\n</tool_call>`; each "
                       "value typed by the tool's schema and returned as JSON (a string parameter streams as it is "
                       "written, other values when they close); a `<tool_call>` not followed by `<function=` is text")

FAMILIES = (
    ModelFamily(name="qwen3_coder", reasoning="qwen3", parser=Qwen3CoderToolParser(), template="qwen3_coder", detect=_detect,
                detect_order=5,
                models="Qwen3-Coder, Qwen3.5",
                writes=_QWEN3_CODER_WRITES,
                detects="`<function=` with `<parameter=`"),
    # vLLM's other spelling for the same XML format
    ModelFamily(name="qwen3_xml", reasoning="qwen3", parser=Qwen3CoderToolParser(name="qwen3_xml"), detect=lambda t: False,
                detect_order=6,
                doc_row="qwen3_coder"),
)
