"""LongCat-Flash tool calls (vLLM's ``longcat``): Hermes' JSON calls inside LongCat's own markers.

Format: ``<longcat_tool_call>{"name": "f", "arguments": {...}}</longcat_tool_call>``, several
separated by newlines. Everything else (several calls in a block, ``"parameters"`` for
``"arguments"``, malformed calls kept as content) is Hermes' rule (:mod:`tool_parsers.hermes`).
"""
from __future__ import annotations

from .base import CallFormat, ModelFamily
from .hermes import HermesToolParser

__all__ = ["FAMILIES", "START", "END"]

START, END = "<longcat_tool_call>", "</longcat_tool_call>"

_LONGCAT_WRITES = ("`<longcat_tool_call>{\"name\": \"f\", \"arguments\": {...}}</longcat_tool_call>`, one block per call: "
                   "Hermes' JSON calls and rules inside LongCat's markers (detected before `hermes`; no template "
                   "shipped: the model's own is read)")

FAMILIES = (
    ModelFamily(
        name="longcat",
        parser=HermesToolParser(name="longcat", start=START, end=END, format=CallFormat(
            trigger=START, section_begin="", call_begin=START + '{"name": "', name_end='", "arguments": ',
            call_end="}" + END, separator="\n", section_end="")),
        detect=lambda template: START in template,
        detect_order=9,  # before hermes, whose marker it does not contain but whose parser it shares
        models="Meituan LongCat-Flash",
        writes=_LONGCAT_WRITES,
        detects="`<longcat_tool_call>` (before hermes)",
    ),
)
