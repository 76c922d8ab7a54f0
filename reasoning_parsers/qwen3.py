"""Qwen3: ``<think>`` optional (thinking templates open it in the prompt); a
``<tool_call>`` ends the reasoning even when the model forgot ``</think>``."""
from __future__ import annotations

from typing import ClassVar

from .base import ReasoningParser

__all__ = ["Qwen3ReasoningParser"]


class Qwen3ReasoningParser(ReasoningParser):
    """Reasoning until ``</think>`` or ``<tool_call>``; pass ``thinking=False`` when the
    request disabled thinking (the template then closes the block in the prompt)."""

    name: ClassVar[str] = "qwen3"
    starts_open: ClassVar[bool] = True
    tool_start: ClassVar[tuple[str, ...]] = ("<tool_call>",)
