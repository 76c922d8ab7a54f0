"""gpt-oss (vLLM's ``openai_gptoss``): Harmony's leading analysis message is the reasoning.

The prompt ends with ``<|start|>assistant``; a thinking answer opens with
``<|channel|>analysis<|message|>`` and the message ends at ``<|end|>``. What follows (more
messages: the final answer, a preamble, a call, or more analysis) is the Harmony tool parser's
(``tool_parsers/gpt_oss.py``), which returns later analysis messages as reasoning too
(``ParsedTools.reasoning``). gpt-oss always thinks (``reasoning_effort`` low / medium / high sets
how much), so no template switch turns it off; the grammar's reasoning prefix is this block.
"""
from __future__ import annotations

from typing import ClassVar

from .base import ReasoningParser

__all__ = ["GptOssReasoningParser", "PARSERS"]


class GptOssReasoningParser(ReasoningParser):
    """The first ``<|channel|>analysis<|message|>...<|end|>`` message."""

    name: ClassVar[str] = "openai_gptoss"
    aliases: ClassVar[tuple[str, ...]] = ("gpt_oss",)
    start: ClassVar[str] = "<|channel|>analysis<|message|>"
    end: ClassVar[str] = "<|end|>"
    switches: ClassVar[tuple[str, ...]] = ()


PARSERS = (GptOssReasoningParser,)
