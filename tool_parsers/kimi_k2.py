"""Kimi K2 / K2.5 tool calls (vLLM's ``kimi_k2``).

Format (Kimi-K2's tool_call_guidance)::

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>
    {"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

(one line; wrapped here)

The header is the call's id, ``functions.<name>:<index>``; the name is what sits between the
``functions.`` prefix and the last ``:<digits>`` (a bare name is read too). Arguments are the
model's own JSON. The index counts calls across the conversation, which the pieces of a
:class:`CallFormat` cannot say, so the family owns its grammar (:meth:`KimiCallFormat.structural_tag`,
XGrammar's ``kimi`` built-in tag: any digits). Text after the section is content.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from ._blocks import SectionToolParser
from ._scan import marked_name_end, skip_ws
from .base import CallFormat, JsonObject, JsonValue, ModelFamily

__all__ = ["KimiK2ToolParser", "KimiCallFormat", "FAMILIES"]

SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_BEGIN, ARGS_BEGIN, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
_PREFIX = "functions."
_INDEX = re.compile(r":\d+\Z")
_BAD_NAME = re.compile(r"[<>\n|]")


@dataclass(frozen=True)
class KimiCallFormat(CallFormat):
    """The pieces (index 0, for prompts and round trips) and the grammar with any index."""

    def structural_tag(self, tools: Sequence[tuple[str, JsonValue]], *, mode: Literal["auto", "required"],
                       parallel: bool, arguments: Callable[[JsonValue], JsonObject]) -> JsonObject | None:
        calls: list[JsonValue] = [{"type": "tag", "begin": f"{CALL_BEGIN}{_PREFIX}{name}:", "end": CALL_END,
                  "content": {"type": "sequence", "elements": [
                      {"type": "regex", "pattern": r"\d{1,4}"}, {"type": "const_string", "value": ARGS_BEGIN},
                      arguments(schema)]}} for name, schema in tools]
        inner: JsonObject = {"type": "tags_with_separator", "tags": calls, "separator": "", "at_least_one": True,
                             "stop_after_first": not parallel}
        section: JsonObject = {"type": "tag", "begin": SECTION_BEGIN, "content": inner, "end": SECTION_END}
        if mode == "required":
            return section
        return {"type": "triggered_tags", "triggers": [SECTION_BEGIN], "tags": [section], "stop_after_first": True}


class KimiK2ToolParser(SectionToolParser):
    """One ``<|tool_calls_section_begin|>`` section of calls."""

    name: ClassVar[str] = "kimi_k2"
    start: ClassVar[str] = SECTION_BEGIN
    end: ClassVar[str] = SECTION_END
    call_open: ClassVar[str] = CALL_BEGIN
    format: ClassVar[CallFormat] = KimiCallFormat(
        trigger=SECTION_BEGIN, section_begin=SECTION_BEGIN, call_begin=CALL_BEGIN + _PREFIX,
        name_end=":0" + ARGS_BEGIN, call_end=CALL_END, separator="", section_end=SECTION_END)

    def write_call(self, index: int, name: str, arguments: Mapping[str, JsonValue]) -> str:
        """``functions.name:index``: each call's index counts up from 0 (the template's ids)."""
        return f"{CALL_BEGIN}{_PREFIX}{name}:{index}{ARGS_BEGIN}{self.write_arguments(arguments)}{CALL_END}"

    def _header(self, text: str, p: int, *, final: bool) -> tuple[str | None, int | None, str]:
        """``functions.name:index<|tool_call_argument_begin|>``: the name."""
        p = skip_ws(text, p)
        q = marked_name_end(text, p, ARGS_BEGIN, _BAD_NAME, final=final)
        if q is None:
            return None, None, CALL_END
        call_id = text[p:q].strip()  # vLLM's cases put spaces around the header
        name = _INDEX.sub("", call_id.removeprefix(_PREFIX))
        return name, q + len(ARGS_BEGIN), CALL_END


def _detect(template: str) -> bool:
    return SECTION_BEGIN in template or "tool_declare" in template


_KIMI_K2_WRITES = ("`<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{...}<|"
                   "tool_call_end|><|tool_calls_section_end|>`; the index after `:` counts calls (the grammar allows"
                   " any digits); the name is read from between `functions.` and `:N`")

FAMILIES = (
    ModelFamily(name="kimi_k2", reasoning="kimi_k2", parser=KimiK2ToolParser(), detect=_detect, detect_order=4,
                models="Kimi K2, K2.5",
                writes=_KIMI_K2_WRITES,
                detects="`<|tool_calls_section_begin|>` or `tool_declare`"),
)
