"""Seed-OSS (vLLM's ``seed_oss``): reasoning in ``<seed:think>`` .. ``</seed:think>``.

Seed-OSS always thinks (its ``thinking_budget`` only bounds how long; at 0 the template opens the
block itself), so, as vLLM's parser (Qwen3's with Seed's markers), text is reasoning until
``</seed:think>`` with or without the opening marker; ``enable_thinking: false`` turns that off.
``<seed:cot_budget_reflect>`` notes inside the block are reasoning text. The served tool-call
family's trigger (``<seed:tool_call>``) ends a block the model forgot to close (the rule in
:mod:`reasoning_parsers.base`).
"""
from __future__ import annotations

from typing import ClassVar

from .base import ReasoningParser

__all__ = ["SeedOssReasoningParser", "PARSERS"]


class SeedOssReasoningParser(ReasoningParser):
    """Reasoning until ``</seed:think>`` (or the call trigger, when the output ends without it)."""

    name: ClassVar[str] = "seed_oss"
    start: ClassVar[str] = "<seed:think>"
    end: ClassVar[str] = "</seed:think>"
    starts_open: ClassVar[bool] = True
    switches: ClassVar[tuple[str, ...]] = ("enable_thinking",)


PARSERS = (SeedOssReasoningParser,)
