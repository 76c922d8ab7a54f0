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
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from .base import CallFormat, ModelFamily, ParsedTools, ToolCallPart, ToolParser

if TYPE_CHECKING:  # pragma: no cover
    from reasoning_parsers.base import ReasoningParser

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
    "Parsers",
    "resolve_parsers",
    "unrecognised_template",
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


@dataclass(frozen=True)
class Parsers:
    """The family a process serves, resolved once: the renderer (call ids), the parsers and the
    grammar all read this. ``how`` says how each was chosen, for the start-up log."""

    family: ModelFamily | None
    reasoning: ReasoningParser | None
    how: str

    @property
    def tool_parser(self) -> ToolParser | None:
        return self.family.parser if self.family else None

    def describe(self) -> str:
        """One line for the start-up log: family, parser, reasoning parser and grammar."""
        if self.family is None:
            tools = "no tool-call family (requests with tools get 400 tools_unsupported)"
        else:
            fmt = self.family.format
            own = type(fmt).structural_tag is not CallFormat.structural_tag
            grammar = "the family's own structural tag" if own else "a structural tag from its call format"
            tools = (f"tool-call family {self.family.name} (parser {type(self.family.parser).__name__}; grammar: "
                     f"{grammar}, calls opened by {fmt.trigger!r}, arguments as {fmt.arguments_style})")
        thinking = f"reasoning parser {self.reasoning.name}" if self.reasoning else "no reasoning parser"
        return f"{tools}; {thinking}; chosen by {self.how}"


def unrecognised_template(template_name: str) -> str:
    """The start-up warning for a chat template that renders tools in no known family's format."""
    return (f"the chat template ({template_name}) renders tools in a format gramserve does not recognise, so "
            "requests with tools get 400 tools_unsupported: start the server with --tool-call-parser NAME "
            f"({', '.join(sorted(_FAMILIES))}) naming the format the model writes, and --chat-template "
            "NAME|FILE if its template should be replaced")


def resolve_parsers(tool_call_parser: str | None, reasoning_parser: str | None, *, template_name: str,
                    template_source: str, builtin_names: tuple[str, ...] = ()) -> Parsers:
    """Resolve ``--tool-call-parser`` and ``--reasoning-parser`` against the chat template, once.

    ``auto`` tool parser: a built-in template names its family; else the template's markers pick
    it (:func:`detect_family`); None when nothing matches. ``auto`` reasoning parser: the family's
    ``reasoning`` parser when the template writes that parser's start marker (a thinking
    template). The reasoning parser is given the family's trigger as ``tool_start``, so a call the
    model opens without closing its thinking is still read (the rule in ``reasoning_parsers.base``).
    Raises ValueError naming the choices for an unknown name."""
    from reasoning_parsers import get_reasoning_parser

    how = []
    family = None
    if tool_call_parser == "auto":
        if template_name in builtin_names and template_name in _FAMILIES:
            family, why = _FAMILIES[template_name], f"the built-in template {template_name}"
        else:
            family, why = detect_family(template_source), f"the markers of the chat template ({template_name})"
        how.append(f"tool-call parser auto: {why}")
    elif tool_call_parser:
        family = get_family(tool_call_parser)
        how.append(f"--tool-call-parser {tool_call_parser}")
    name = reasoning_parser
    if reasoning_parser == "auto":
        name = None
        if family is not None and family.reasoning:
            candidate = get_reasoning_parser(family.reasoning)
            if candidate.start in template_source:
                name = family.reasoning
        how.append(f"reasoning parser auto: {'the template thinks' if name else 'the template does not think'}")
    elif reasoning_parser:
        how.append(f"--reasoning-parser {reasoning_parser}")
    tool_start = (family.format.trigger,) if family else ()
    reasoning = get_reasoning_parser(name, tool_start=tool_start) if name else None
    return Parsers(family=family, reasoning=reasoning, how="; ".join(how) or "flags")
