"""DeepSeek-R1: the chat template opens ``<think>``; reasoning runs until ``</think>``."""
from __future__ import annotations

from typing import ClassVar

from .base import ReasoningParser

__all__ = ["DeepSeekR1ReasoningParser"]


class DeepSeekR1ReasoningParser(ReasoningParser):
    """Text is reasoning until ``</think>``, with or without a leading ``<think>``."""

    name: ClassVar[str] = "deepseek_r1"
    starts_open: ClassVar[bool] = True
