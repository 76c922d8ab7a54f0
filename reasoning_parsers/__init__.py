"""Reasoning parsers, one module per template family, in vLLM's spelling: registry.

Each module (``reasoning_parsers/<name>.py``, any module here but ``base``) declares ``PARSERS``
(classes; their ``name`` and ``aliases`` are the ``--reasoning-parser`` names). See
:mod:`reasoning_parsers.base` for the conventions, including the one rule for a tool call
opened inside the thinking block.
"""
from __future__ import annotations

import importlib
import pkgutil

from .base import ReasoningParser, thinking_on

__all__ = ["ReasoningParser", "REASONING_PARSERS", "get_reasoning_parser", "thinking_on"]

_CLASSES: dict[str, type[ReasoningParser]] = {}
for _info in pkgutil.iter_modules(__path__):
    if _info.name != "base" and not _info.name.startswith("_"):
        for _cls in getattr(importlib.import_module(f"{__name__}.{_info.name}"), "PARSERS", ()):
            for _name in (_cls.name, *_cls.aliases):
                if _name in _CLASSES:
                    raise ValueError(f"two reasoning parsers are named {_name!r}")
                _CLASSES[_name] = _cls
REASONING_PARSERS: tuple[str, ...] = tuple(sorted(_CLASSES))


def get_reasoning_parser(name: str, *, thinking: bool = True, tool_start: tuple[str, ...] = ()) -> ReasoningParser:
    """A parser by registry name. ``thinking=False`` when the request turned thinking off;
    ``tool_start``: the served tool-call family's trigger (ends reasoning the model forgot to close)."""
    try:
        cls = _CLASSES[name]
    except KeyError:
        raise ValueError(
            f"unknown reasoning parser {name!r}; choose one of: {', '.join(REASONING_PARSERS)}"
        ) from None
    return cls(thinking=thinking, tool_start=tool_start)
