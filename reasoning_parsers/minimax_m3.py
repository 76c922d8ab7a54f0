"""MiniMax M3 (vLLM's ``minimax_m3``): reasoning in ``<mm:think>`` .. ``</mm:think>``.

M3's adaptive mode (XGrammar's default for the model) leaves the block to the model: it opens
``<mm:think>`` itself, or answers at once, sometimes after a lone ``</mm:think>`` (dropped here).
So only an explicit ``<mm:think>`` opens reasoning, as vLLM's parser reads it without
``thinking_mode="enabled"``. The prompt-opened block of ``thinking_mode="enabled"`` is not read
(that kwarg is not a boolean switch; see docs/reasoning.md). The served tool-call family's trigger
ends a block the model forgot to close (the rule in :mod:`reasoning_parsers.base`).
"""
from __future__ import annotations

from typing import ClassVar

from .base import ReasoningParser

__all__ = ["MiniMaxM3ReasoningParser", "PARSERS"]


class MiniMaxM3ReasoningParser(ReasoningParser):
    """An explicit ``<mm:think>`` block; a lone leading ``</mm:think>`` is not content."""

    name: ClassVar[str] = "minimax_m3"
    start: ClassVar[str] = "<mm:think>"
    end: ClassVar[str] = "</mm:think>"
    switches: ClassVar[tuple[str, ...]] = ()

    def split_at(self, text: str, *, final: bool, inside: bool = False) -> tuple[str, str, int | None]:
        if not inside and not self.open_at_start:
            p = len(text) - len(text.lstrip())
            if text.startswith(self.end, p):
                return "", text[p + len(self.end):], None
            if not final and p < len(text) and self.end.startswith(text[p:]):
                return "", "", None  # may still become the lone closing marker: wait
        return super().split_at(text, final=final, inside=inside)


PARSERS = (MiniMaxM3ReasoningParser,)
