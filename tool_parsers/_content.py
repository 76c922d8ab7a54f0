"""Assembling the content (text outside tool calls) of one parse.

Convention shared by all tool parsers: whitespace-only text next to a tool call (before
the first call, between calls, after the last one) is layout, not content, and is dropped.
Any other text outside calls is content, verbatim. While streaming, a whitespace-only run
is held back until we know whether a call or real text follows it.
"""
from __future__ import annotations

__all__ = ["ContentBuilder", "next_marker"]


class ContentBuilder:
    """Collects content segments around calls for one parse (not kept between parses)."""

    def __init__(self) -> None:
        self._done: list[str] = []
        self._segment: list[str] = []
        self.calls = 0

    def add(self, text: str) -> None:
        """Append text outside calls (including a malformed call's text)."""
        if text:
            self._segment.append(text)

    def call(self) -> None:
        """A call starts here: close the current segment (dropped if whitespace only)."""
        segment = "".join(self._segment)
        if segment.strip():
            self._done.append(segment)
        self._segment = []
        self.calls += 1

    def result(self, *, final: bool) -> str:
        """The content; a trailing whitespace-only run is held back unless final with no
        call in the text."""
        segment = "".join(self._segment)
        if segment.strip() or (final and not self.calls):
            return "".join(self._done) + segment
        return "".join(self._done)


def next_marker(text: str, marker: str, pos: int, *, final: bool, out: ContentBuilder) -> int | None:
    """Where the next ``marker`` starts at or after ``pos``, the text before it added to
    ``out`` as content. None when there is none: the rest is content, except (while not final)
    a tail that may be the start of the marker, which is held back."""
    from ._scan import partial_marker_start

    i = text.find(marker, pos)
    if i < 0:
        stop = len(text) if final else partial_marker_start(text, (marker,), pos)
        out.add(text[pos:stop])
        return None
    out.add(text[pos:i])
    return i
