"""Magistral (vLLM's ``mistral``): the model writes ``[THINK]...[/THINK]`` itself (v13+ control
tokens, kept in the output when tools or reasoning need them); nothing is opened in the prompt."""
from __future__ import annotations

from typing import ClassVar

from .base import ReasoningParser

__all__ = ["MistralReasoningParser", "PARSERS"]


class MistralReasoningParser(ReasoningParser):
    """Reasoning only inside an explicit ``[THINK]`` block at the start."""

    name: ClassVar[str] = "mistral"
    start: ClassVar[str] = "[THINK]"
    end: ClassVar[str] = "[/THINK]"


PARSERS = (MistralReasoningParser,)
