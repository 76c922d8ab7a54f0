"""Tool-call parsers: registry and detection from a chat template.

Every parser is a pure function of the generated text (see :mod:`tool_parsers.base`).
"""
from __future__ import annotations

import re

from .base import CallFormat, ParsedTools, ToolCallPart, ToolParser
from .hermes import HermesToolParser
from .llama3_json import Llama3JsonToolParser
from .mistral import MistralToolParser, MistralV11ToolParser, MistralV13ToolParser

__all__ = [
    "CallFormat",
    "ParsedTools",
    "ToolCallPart",
    "ToolParser",
    "TOOL_PARSERS",
    "get_tool_parser",
    "detect_tool_parser",
]

_CLASSES: dict[str, type[ToolParser]] = {
    cls.name: cls
    for cls in (
        HermesToolParser,
        Llama3JsonToolParser,
        MistralToolParser,
        MistralV11ToolParser,
        MistralV13ToolParser,
    )
}
TOOL_PARSERS: tuple[str, ...] = tuple(_CLASSES)

# v11 templates write the function name right after the marker: "[TOOL_CALLS]" + name.
_MISTRAL_V11 = re.compile(r"\[TOOL_CALLS\]\s*(?:['\"]\s*\+|\{\{)")
_LLAMA3_PARAMETERS = re.compile(r"[\"']?parameters[\"']?")


def get_tool_parser(name: str) -> ToolParser:
    """A parser instance by registry name (parsers are stateless; instances are cheap)."""
    try:
        return _CLASSES[name]()
    except KeyError:
        raise ValueError(
            f"unknown tool parser {name!r}; choose one of: {', '.join(TOOL_PARSERS)}"
        ) from None


def detect_tool_parser(chat_template_text: str) -> str | None:
    """Pick the tool parser from the markers a chat template uses, or None if unknown."""
    text = chat_template_text or ""
    if "<tool_call>" in text:
        return HermesToolParser.name
    if "[TOOL_CALLS]" in text or "[AVAILABLE_TOOLS]" in text:
        if "[ARGS]" in text:
            return MistralV13ToolParser.name
        if _MISTRAL_V11.search(text):
            return MistralV11ToolParser.name
        return MistralToolParser.name
    if "<|python_tag|>" in text:
        return Llama3JsonToolParser.name
    if "<|start_header_id|>" in text and _LLAMA3_PARAMETERS.search(text):
        return Llama3JsonToolParser.name
    return None
