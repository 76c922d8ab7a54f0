"""Tool-call formats, one module per model family: registry and detection.

Each family module (``tool_parsers/<family>.py``, any module here not starting with ``_``
and not one of the shared modules in ``_SHARED``) declares ``FAMILIES``:
:class:`~tool_parsers.base.ModelFamily` data with its parser, call format, detection and
call-id rule. Adding a family is adding one module
(and, to ship a template, ``chat_templates/<name>.jinja``). Every parser is a pure function
of the generated text (see :mod:`tool_parsers.base`).
"""
from __future__ import annotations

import importlib
import pkgutil
from types import MappingProxyType
from typing import Mapping

from .base import CallFormat, ModelFamily, ParsedTools, ToolCallPart, ToolParser

__all__ = [
    "CallFormat",
    "ModelFamily",
    "ParsedTools",
    "ToolCallPart",
    "ToolParser",
    "FAMILIES",
    "TOOL_PARSERS",
    "register_family",
    "get_family",
    "get_tool_parser",
    "detect_family",
    "detect_tool_parser",
]

_FAMILIES: dict[str, ModelFamily] = {}
_SHARED = ("base", "message_stream", "openai_message", "replay", "replay_cli")  # not families


def register_family(family: ModelFamily) -> ModelFamily:
    """Add a family (built-in modules are registered on import; tests and plugins may add more)."""
    if family.name in _FAMILIES and _FAMILIES[family.name] is not family:
        raise ValueError(f"a tool-call family named {family.name!r} is already registered")
    _FAMILIES[family.name] = family
    return family


for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_") and _info.name not in _SHARED:
        for _family in getattr(importlib.import_module(f"{__name__}.{_info.name}"), "FAMILIES", ()):
            register_family(_family)

FAMILIES: Mapping[str, ModelFamily] = MappingProxyType(_FAMILIES)  # a live view
TOOL_PARSERS: tuple[str, ...] = tuple(sorted(_FAMILIES))  # the built-in families


def get_family(name: str) -> ModelFamily:
    try:
        return _FAMILIES[name]
    except KeyError:
        raise ValueError(
            f"unknown tool parser {name!r}; choose one of: {', '.join(sorted(_FAMILIES))}"
        ) from None


def get_tool_parser(name: str) -> ToolParser:
    """A family's parser by registry name (parsers are stateless and shared)."""
    return get_family(name).parser


def detect_family(chat_template_text: str) -> ModelFamily | None:
    """The family whose markers a chat template uses, or None if unknown."""
    text = chat_template_text or ""
    for family in sorted(_FAMILIES.values(), key=lambda f: (f.detect_order, f.name)):
        if family.detect(text):
            return family
    return None


def detect_tool_parser(chat_template_text: str) -> str | None:
    """The name of :func:`detect_family`'s answer, or None."""
    family = detect_family(chat_template_text)
    return family.name if family else None
