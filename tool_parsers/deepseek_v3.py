"""DeepSeek V3 / V3.1+ tool calls (vLLM's ``deepseek_v31`` and ``deepseek_v3``).

V3.1 and later (V3.1-Terminus, V3.2-Exp), one section of calls written without separators::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>

V3 (V3-0324, R1-0528) puts a type before the name and fences the JSON::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

Both families read both shapes (a model fine-tuned across versions writes either); the name
only decides what the grammar makes the model write. Arguments are the model's own JSON. Text
after the section is content (vLLM drops it; a server should not). A section the text cuts off
keeps the calls it completed; a section that breaks otherwise is content up to its end marker.
"""
from __future__ import annotations

import re
from typing import ClassVar

from ._blocks import SectionToolParser
from ._scan import JsonError, marked_name_end, skip_ws
from .base import CallFormat, ModelFamily

__all__ = ["DeepSeekV3ToolParser", "V3_FORMAT", "FAMILIES"]

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
_FENCE_OPEN, _FENCE_CLOSE = "\n```json\n", "\n```"
_V3_TYPE = "function"
_BAD_NAME = re.compile(r"[<>\n｜]")


class DeepSeekV3ToolParser(SectionToolParser):
    """One ``<｜tool▁calls▁begin｜>`` section of calls; the format data is V3.1's."""

    name: ClassVar[str] = "deepseek_v31"
    start: ClassVar[str] = CALLS_BEGIN
    end: ClassVar[str] = CALLS_END
    call_open: ClassVar[str] = CALL_BEGIN
    format: ClassVar[CallFormat] = CallFormat(
        trigger=CALLS_BEGIN, section_begin=CALLS_BEGIN, call_begin=CALL_BEGIN, name_end=SEP, call_end=CALL_END,
        separator="", section_end=CALLS_END)

    def _header(self, text: str, p: int, *, final: bool) -> tuple[str | None, int | None, str]:
        """``name<｜tool▁sep｜>``, or V3's ``function<｜tool▁sep｜>name`` and its fence."""
        s = marked_name_end(text, p, SEP, _BAD_NAME, final=final)
        if s is None:
            return None, None, CALL_END
        name, q = text[p:s], s + len(SEP)
        if name != _V3_TYPE:
            return name, q, CALL_END
        r = skip_ws(text, q)  # V3's type, or a tool named "function" (V3.1: JSON follows)
        if r >= len(text) and not final:
            return None, None, CALL_END
        if r < len(text) and text[r] == "{":
            return name, q, CALL_END
        n = marked_name_end(text, q, "\n", _BAD_NAME, final=final)
        if n is None:
            return None, None, CALL_END
        name = text[q:n]
        if text.startswith(_FENCE_OPEN, n):
            return name, n + len(_FENCE_OPEN), _FENCE_CLOSE + CALL_END
        if not final and _FENCE_OPEN.startswith(text[n:]):
            return name, None, CALL_END
        raise JsonError("expected a ```json fence", n)


V3_FORMAT = CallFormat(  # <｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{...}\n```<｜tool▁call▁end｜>
    trigger=CALLS_BEGIN, section_begin=CALLS_BEGIN, call_begin=CALL_BEGIN + _V3_TYPE + SEP, name_end=_FENCE_OPEN,
    call_end=_FENCE_CLOSE + CALL_END, separator="", section_end=CALLS_END)


def _detect_v3(template: str) -> bool:
    """V3's template writes the type and the fence; V3.1's writes the name right after the marker."""
    return CALLS_BEGIN in template and "```json" in template


_DEEPSEEK_V31_WRITES = ("`<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜>"
                        "<｜tool▁calls▁end｜>` "
                        "(V3.1); V3 writes `<｜tool▁call▁begin｜>function<｜tool▁sep｜>f` then the JSON in a json code fence."
                        " Both names read both shapes; the name decides what the grammar makes the model write; a "
                        "`<｜tool▁calls▁begin｜>` repeated inside the section (V3.1 writes it again before a second call) "
                        "is skipped")

FAMILIES = (
    ModelFamily(name="deepseek_v3", reasoning="deepseek_r1", parser=DeepSeekV3ToolParser(name="deepseek_v3", format=V3_FORMAT),
                detect=_detect_v3, detect_order=3,
                doc_row="deepseek_v31",
                detects="`<｜tool▁calls▁begin｜>` with the JSON in a ```` ```json ```` fence"),
    ModelFamily(name="deepseek_v31", reasoning="deepseek_v3", parser=DeepSeekV3ToolParser(), detect=lambda t: CALLS_BEGIN in t,
                detect_order=4,
                models="DeepSeek V3.1, V3.1-Terminus, V3.2-Exp / DeepSeek V3-0324, R1-0528",
                writes=_DEEPSEEK_V31_WRITES,
                detects="`<｜tool▁calls▁begin｜>`"),
)
