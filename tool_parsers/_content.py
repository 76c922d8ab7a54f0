"""Assembling the content (text outside tool calls) of one parse.

Convention shared by all tool parsers: whitespace-only text next to a tool call (before
the first call, between calls, after the last one) is layout, not content, and is dropped.
Any other text outside calls is content, verbatim. While streaming, a whitespace-only run
is held back until we know whether a call or real text follows it.

Checkpoints (see :class:`~tool_parsers.base.Checkpoint`) are taken only where parsing the
rest afresh cannot change how this convention treats the text around them: right at a
call's marker (unless a whitespace-only run is pending before it), after a call when no
text is pending, or at a non-whitespace character of trailing content.
"""
from __future__ import annotations

import functools
import re

from ._scan import JsonError, partial_marker_start
from .base import Checkpoint

__all__ = ["AFTER_CALL", "ContentBuilder", "next_marker", "malformed_block", "without"]

AFTER_CALL = "after_call"  # resume word: the settled text held at least one call


class ContentBuilder:
    """Collects content segments around calls for one parse (not kept between parses)."""

    def __init__(self, *, resume: str | None = None) -> None:
        self._done: list[str] = []
        self._segment: list[str] = []
        self._done_len = 0
        self._seg_len = 0
        self._seg_text = False  # the segment holds non-whitespace
        self.calls = 1 if resume == AFTER_CALL else 0  # calls before the text parsed here count
        self.tail_end = 0  # where the trailing content added by next_marker stops (held text after)
        self.wait: tuple[int, str, bool] | None = None  # the parse's end, held as a marker's start (ParsedTools.wait)

    @property
    def length(self) -> int:
        """Length of the content so far, the current segment included."""
        return self._done_len + self._seg_len

    def add(self, text: str) -> None:
        """Append text outside calls (including a malformed call's text)."""
        if text:
            self._segment.append(text)
            self._seg_len += len(text)
            self._seg_text = self._seg_text or not text.isspace()

    def call(self) -> None:
        """A call starts here: close the current segment (dropped if whitespace only)."""
        if self._seg_text:
            self._done.extend(self._segment)
            self._done_len += self._seg_len
        self._segment, self._seg_len, self._seg_text = [], 0, False
        self.calls += 1

    def result(self, *, final: bool) -> str:
        """The content; a trailing whitespace-only run is held back unless final with no
        call in the text."""
        if self._seg_text or (final and not self.calls):
            return "".join(self._done) + "".join(self._segment)
        return "".join(self._done)

    def checkpoint(self, pos: int, calls: int, errors: int, *, at_marker: bool = False) -> Checkpoint | None:
        """A checkpoint at ``pos``: right before a call marker (``at_marker``) or where no text
        is pending; None when a whitespace-only run is pending (a call or text after it decides
        whether it is content)."""
        if self._seg_len and not (at_marker and self._seg_text):
            return None
        return Checkpoint(pos, self.length, calls, errors, AFTER_CALL if self.calls else None)

    def tail_checkpoint(self, text: str, start: int, calls: int, errors: int) -> Checkpoint | None:
        """A checkpoint at the last non-whitespace character of the trailing content
        ``text[start:self.tail_end]`` (added last; the rest then starts with text)."""
        stop = self.tail_end
        last = len(text[start:stop].rstrip()) - 1
        if last < 0:
            return None
        return Checkpoint(start + last, self.length - (stop - start - last), calls, errors,
                          AFTER_CALL if self.calls else None)


def next_marker(text: str, marker: str, pos: int, *, final: bool, out: ContentBuilder) -> int | None:
    """Where the next ``marker`` starts at or after ``pos``, the text before it added to
    ``out`` as content. None when there is none: the rest is content, except (while not final)
    a tail that may be the start of the marker, which is held back."""
    i = text.find(marker, pos)
    if i < 0:
        stop = len(text) if final else partial_marker_start(text, (marker,), pos)
        out.add(text[pos:stop])
        out.tail_end = stop
        if stop < len(text):
            out.wait = (stop, marker, False)
        return None
    out.add(text[pos:i])
    return i


def malformed_block(text: str, marker: int, body: int, exc: JsonError, *, end: str, final: bool, who: str,
                    out: ContentBuilder, errors: list[str], bad: list[tuple[int, int | None]],
                    end_opens: bool = False) -> int | None:
    """A call whose block opened at ``marker`` (its text from ``body``) broke at ``exc.pos``:
    its text up to the block's ``end`` marker (leading whitespace dropped) is content, the
    region goes to ``bad`` and the reason to ``errors``. Where parsing resumes: after that end
    marker (at it when ``end_opens``: blocks without an end marker run to the next opening
    one, as Mistral's), or None when there is none (yet): the rest is the broken call's (held
    while streaming)."""
    errors.append(f"{who}: malformed tool call at offset {marker} ({exc}); kept as content")
    stop = text.find(end, max(body, min(exc.pos, len(text))))
    if stop < 0:
        cut = len(text) if final else partial_marker_start(text, (end,), body)
        out.add(text[body:cut].lstrip())
        bad.append((marker, len(text) if final else None))
        return None
    out.add(text[body:stop].lstrip())
    resume = stop if end_opens else stop + len(end)
    bad.append((marker, resume))
    return resume


@functools.lru_cache(maxsize=64)
def without(char: str) -> re.Pattern[str]:
    """Text without ``char``: prose that cannot begin a marker starting with it (``prose_inert``;
    one pattern per marker's first character, per process)."""
    return re.compile(f"[^{re.escape(char)}]+")
