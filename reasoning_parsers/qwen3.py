"""Qwen3 (vLLM's ``qwen3``): ``<think>`` optional (thinking templates open it in the prompt);
thinking is on unless ``enable_thinking`` is false. The served tool-call family's trigger
(``<tool_call>`` for Qwen3's hermes calls) ends the reasoning when the model forgot ``</think>``."""
from __future__ import annotations

from typing import ClassVar

from .base import ReasoningParser

__all__ = ["Qwen3ReasoningParser", "PARSERS"]


class Qwen3ReasoningParser(ReasoningParser):
    """Reasoning until ``</think>`` (or the call trigger, when the output ends without it)."""

    name: ClassVar[str] = "qwen3"
    starts_open: ClassVar[bool] = True
    switches: ClassVar[tuple[str, ...]] = ("enable_thinking",)


PARSERS = (Qwen3ReasoningParser,)
