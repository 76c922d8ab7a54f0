"""Kimi K3 (vLLM's ``kimi_k3``): the XTML think channel, ``<|open|>think<|sep|>`` .. ``<|close|>think<|sep|>``.

Kimi-K3's template thinks unless ``thinking`` is false, and then its generation prompt opens the
think channel itself (with thinking off it opens the response channel instead). What follows the
channel (the response and tools channels) is the ``kimi_k3`` tool parser's. The served tool-call
family's trigger (``<|open|>tools<|sep|>``) ends a think channel the model never closed (the rule
in :mod:`reasoning_parsers.base`).
"""
from __future__ import annotations

from typing import ClassVar

from .base import ReasoningParser

__all__ = ["KimiK3ReasoningParser", "PARSERS"]


class KimiK3ReasoningParser(ReasoningParser):
    """Reasoning until ``<|close|>think<|sep|>``; the prompt opens the channel."""

    name: ClassVar[str] = "kimi_k3"
    start: ClassVar[str] = "<|open|>think<|sep|>"
    end: ClassVar[str] = "<|close|>think<|sep|>"
    starts_open: ClassVar[bool] = True
    switches: ClassVar[tuple[str, ...]] = ("thinking", "enable_thinking")


PARSERS = (KimiK3ReasoningParser,)
