"""ByteDance Seed-OSS tool calls (vLLM's ``seed_oss``).

Format (Seed-OSS-36B's chat template; vLLM's ``SeedOssParser`` is its Qwen3 XML parser with other
wrapper tokens)::

    <seed:tool_call>
    <function=get_weather>
    <parameter=location>Barcelona, Spain</parameter>
    <parameter=days>3</parameter>
    </function>
    </seed:tool_call>

The ``<function=`` / ``<parameter=`` elements are Qwen3-Coder's byte for byte, so the parser is
qwen3_coder's with the section markers changed: values are text typed by the tool's schema and come
back as JSON (a string parameter streams as it is written, others when they close; one newline
after ``<parameter=k>`` and one before ``</parameter>`` are layout, as vLLM reads them). XGrammar
has no Seed-OSS built-in tag; its ``qwen_xml`` argument style writes these elements, in the
template's layout (no newline around a value). Seed-OSS thinks in ``<seed:think>`` ..
``</seed:think>`` (``reasoning_parsers.seed_oss``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from .base import CallFormat, JsonValue, ModelFamily
from .qwen3_coder import Qwen3CoderToolParser

__all__ = ["SeedOssToolParser", "TOOL_CALL", "TOOL_CALL_END", "FAMILIES"]

TOOL_CALL, TOOL_CALL_END = "<seed:tool_call>", "</seed:tool_call>"


class SeedOssToolParser(Qwen3CoderToolParser):
    """``<seed:tool_call><function=f><parameter=k>v</parameter></function></seed:tool_call>`` blocks."""

    name: ClassVar[str] = "seed_oss"
    start: ClassVar[str] = TOOL_CALL
    end: ClassVar[str] = TOOL_CALL_END
    format: ClassVar[CallFormat] = CallFormat(
        trigger=TOOL_CALL, section_begin="", call_begin=TOOL_CALL + "\n<function=", name_end=">\n",
        call_end="</function>\n" + TOOL_CALL_END, separator="\n", section_end="", arguments_style="qwen_xml")

    def write_arguments(self, arguments: Mapping[str, JsonValue]) -> str:
        return super().write_arguments(arguments)[1:]  # the name's line already ends (name_end ">\n")


def _detect(template: str) -> bool:
    """Seed-OSS's template names its own markers (it also shows ``<function=``: before qwen3_coder)."""
    return TOOL_CALL in template


_SEED_OSS_WRITES = ("`<seed:tool_call>\\n<function=f>\\n<parameter=k>v</parameter>\\n</function>\\n</seed:tool_call>`: "
                    "Qwen3-Coder's elements inside Seed's markers, read and typed as `qwen3_coder`'s (a `<tool_call>`"
                    " without `seed:` is text); grammar: XGrammar's `qwen_xml` argument style (XGrammar has no "
                    "Seed-OSS tag); thinking `seed_oss` (`<seed:think>`, always on; `<seed:cot_budget_reflect>` notes"
                    " stay reasoning)")

FAMILIES = (
    ModelFamily(name="seed_oss", reasoning="seed_oss", parser=SeedOssToolParser(), detect=_detect, detect_order=2,
                models="ByteDance Seed-OSS (36B)",
                writes=_SEED_OSS_WRITES,
                detects="`<seed:tool_call>` (before qwen3_coder, whose `<function=` its template also shows)"),
)
