"""Types shared by every tool-call parser.

A parser is a pure function of the text generated so far: ``parse(text, final=...)``.
It keeps no streaming state; the server diffs two successive parses (see
``server.stream.compute_deltas``) to produce OpenAI deltas.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["ToolCallPart", "ParsedTools", "ToolParser"]


@dataclass(frozen=True)
class ToolCallPart:
    """One tool call as seen so far.

    ``arguments`` is the raw argument JSON text generated so far (a prefix of the final
    text while ``complete`` is False). ``name`` is None until the whole name is known.
    """

    name: str | None
    arguments: str
    complete: bool


@dataclass(frozen=True)
class ParsedTools:
    """Result of one parse: text outside calls, and the calls in order."""

    content: str
    tool_calls: tuple[ToolCallPart, ...] = ()
    # Set by the parser when a call could not be parsed at the end (final=True); the
    # text is then returned as content and this says why, for logs and metrics.
    errors: tuple[str, ...] = field(default=())


class ToolParser(ABC):
    """One tool-call format. Markers and the constraint are class data."""

    name: ClassVar[str]
    start: ClassVar[str]  # marker that opens the tool-call section (e.g. "<tool_call>")
    end: ClassVar[str]  # marker that closes one call ("" when none)

    @abstractmethod
    def parse(self, text: str, *, final: bool) -> ParsedTools:
        """Parse the whole text so far. While not final, hold back text that may be
        the start of a marker (never emit a partial marker as content)."""

    @abstractmethod
    def structural_tag(
        self, tools: list[dict[str, Any]], *, mode: str, parallel: bool
    ) -> dict[str, Any]:
        """The xgrammar structural tag (JSON-able dict) that constrains calls.

        ``mode`` is "auto" (free text, calls triggered by the start marker), "required"
        (at least one call, no free text before it) or "named" (``tools`` holds the one
        tool that must be called). ``parallel`` False allows at most one call.
        """
