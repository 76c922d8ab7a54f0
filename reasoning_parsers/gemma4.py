"""Gemma 4 (vLLM's ``gemma4``): reasoning in ``<|channel>thought\\n`` .. ``<channel|>``.

Gemma 4 thinks only when ``enable_thinking`` is set (its template then puts ``<|think|>`` in the
system turn; otherwise it closes an empty thought channel in the prompt), and the model opens the
channel itself, so only an explicit ``<|channel>`` opens reasoning. The channel's ``thought\\n``
label is not reasoning (dropped as vLLM drops it; held back while the reasoning could still be
it). The served tool-call family's trigger (``<|tool_call>``) ends a channel the model forgot to
close (the rule in :mod:`reasoning_parsers.base`).
"""
from __future__ import annotations

from typing import ClassVar

from .base import ReasoningParser

__all__ = ["Gemma4ReasoningParser", "PARSERS", "LABEL"]

LABEL = "thought\n"


class Gemma4ReasoningParser(ReasoningParser):
    """An explicit ``<|channel>`` block, its ``thought`` label dropped."""

    name: ClassVar[str] = "gemma4"
    start: ClassVar[str] = "<|channel>"
    end: ClassVar[str] = "<channel|>"
    switches: ClassVar[tuple[str, ...]] = ("enable_thinking",)
    thinking_default: ClassVar[bool] = False

    def split_at(self, text: str, *, final: bool, inside: bool = False) -> tuple[str, str, int | None]:
        reasoning, rest, pos = super().split_at(text, final=final, inside=inside)
        if inside or not text.lstrip().startswith(self.start):
            return reasoning, rest, pos  # only the block's own start carries the label
        if reasoning.startswith(LABEL):
            return reasoning[len(LABEL):], rest, pos
        if reasoning == LABEL.rstrip() and (final or pos is None):
            return "", rest, pos  # an empty thought
        if not final and pos is not None and LABEL.startswith(reasoning):
            return "", rest, None  # may still be the label: wait
        return reasoning, rest, pos


PARSERS = (Gemma4ReasoningParser,)
