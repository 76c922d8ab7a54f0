"""DeepSeek-R1 (vLLM's ``deepseek_r1``): the chat template opens ``<think>``; reasoning runs
until ``</think>``. DeepSeek V3.1+ (vLLM's ``deepseek_v3``) thinks only when the request sets
``chat_template_kwargs.thinking`` (its template then opens the block; otherwise it closes it)."""
from __future__ import annotations

from typing import ClassVar

from .base import ReasoningParser

__all__ = ["DeepSeekR1ReasoningParser", "DeepSeekV3ReasoningParser", "PARSERS"]


class DeepSeekR1ReasoningParser(ReasoningParser):
    """Text is reasoning until ``</think>``, with or without a leading ``<think>``."""

    name: ClassVar[str] = "deepseek_r1"
    starts_open: ClassVar[bool] = True


class DeepSeekV3ReasoningParser(DeepSeekR1ReasoningParser):
    """R1's split, off unless ``thinking`` (or ``enable_thinking``) is set."""

    name: ClassVar[str] = "deepseek_v3"
    switches: ClassVar[tuple[str, ...]] = ("thinking", "enable_thinking")
    thinking_default: ClassVar[bool] = False


PARSERS = (DeepSeekR1ReasoningParser, DeepSeekV3ReasoningParser)
