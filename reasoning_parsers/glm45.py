"""GLM-4.5..4.7 (vLLM's ``glm45`` / ``glm47``) and Kimi K2 Thinking (``kimi_k2``): the prompt opens
``<think>`` when thinking is on (the default; ``enable_thinking`` or ``thinking`` false turns
it off and the template closes the block)."""
from __future__ import annotations

from typing import ClassVar

from .base import ReasoningParser

__all__ = ["Glm45ReasoningParser", "KimiK2ReasoningParser", "PARSERS"]


class Glm45ReasoningParser(ReasoningParser):
    """``<think>...</think>``, open at the start while thinking."""

    name: ClassVar[str] = "glm45"
    aliases: ClassVar[tuple[str, ...]] = ("glm47",)
    starts_open: ClassVar[bool] = True


class KimiK2ReasoningParser(Glm45ReasoningParser):
    """The same split under Kimi's name (its switches are ``thinking`` then ``enable_thinking``)."""

    name: ClassVar[str] = "kimi_k2"
    aliases: ClassVar[tuple[str, ...]] = ()
    switches: ClassVar[tuple[str, ...]] = ("thinking", "enable_thinking")


PARSERS = (Glm45ReasoningParser, KimiK2ReasoningParser)
