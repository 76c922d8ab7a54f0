"""Reasoning parsers: registry. See :mod:`reasoning_parsers.base` for the conventions."""
from __future__ import annotations

from .base import ReasoningParser
from .deepseek_r1 import DeepSeekR1ReasoningParser
from .qwen3 import Qwen3ReasoningParser

__all__ = ["ReasoningParser", "REASONING_PARSERS", "get_reasoning_parser"]

_CLASSES: dict[str, type[ReasoningParser]] = {
    cls.name: cls for cls in (DeepSeekR1ReasoningParser, Qwen3ReasoningParser)
}
REASONING_PARSERS: tuple[str, ...] = tuple(_CLASSES)


def get_reasoning_parser(name: str, *, thinking: bool = True) -> ReasoningParser:
    """A parser by registry name; ``thinking=False`` when the request turned thinking off."""
    try:
        cls = _CLASSES[name]
    except KeyError:
        raise ValueError(
            f"unknown reasoning parser {name!r}; choose one of: {', '.join(REASONING_PARSERS)}"
        ) from None
    return cls(thinking=thinking)
