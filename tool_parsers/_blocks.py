"""The parse loop of every family whose calls sit in marked blocks (``<tool_call>...</tool_call>``):
find each block, keep the text between blocks as content, turn a block that breaks into content
up to its end marker, and checkpoint between blocks. A family supplies what a block holds."""
from __future__ import annotations

import re
from typing import ClassVar

from ._calls import named_arguments
from ._content import ContentBuilder, malformed_block, next_marker, without
from ._scan import JsonError, skip_ws
from .base import Checkpoint, ParsedTools, ToolCallPart, ToolParser

__all__ = ["BlockToolParser", "SectionToolParser"]


class BlockToolParser(ToolParser):
    """Blocks opened by ``start`` and closed by ``end`` (empty: a block runs to the next
    ``start``, as Mistral's); :meth:`_block` reads one."""

    def parse(self, text: str, *, final: bool, resume: str | None = None) -> ParsedTools:
        out = ContentBuilder(resume=resume)
        calls: list[ToolCallPart] = []
        errors: list[str] = []
        bad: list[tuple[int, int | None]] = []
        checkpoint: Checkpoint | None = None
        prose_end, block_open = False, False
        pos = 0
        while (i := next_marker(text, self.start, pos, final=final, out=out)) is not None:
            body = i + len(self.start)
            opens = self._opens_call(text, body, final=final)
            if opens is None:
                break  # what follows the marker decides: wait
            if not opens:  # the marker in prose: text
                out.add(text[i:body])
                pos = body
                continue
            checkpoint = out.checkpoint(i, len(calls), len(errors), at_marker=True) or checkpoint
            try:
                found, end = self._block(text, body, final=final, errors=errors)
            except JsonError as exc:
                resume_at = malformed_block(text, i, body, exc, end=self.end or self.start, final=final,
                                            who=self.name, out=out, errors=errors, bad=bad, end_opens=not self.end)
                if resume_at is None:
                    break
                pos = resume_at
                continue
            out.call()
            calls.extend(found)
            if end is None:  # cut off while streaming
                break
            pos, closed = self._after_block(text, end, final=final, errors=errors, out=out, bad=bad)
            if closed:
                checkpoint = out.checkpoint(pos, len(calls), len(errors)) or checkpoint
            block_open = not closed
        else:
            checkpoint = out.tail_checkpoint(text, pos, len(calls), len(errors)) or checkpoint
            prose_end = out.tail_end == len(text) and not block_open
        return ParsedTools(out.result(final=final), tuple(calls), tuple(errors), checkpoint, tuple(bad), wait=out.wait,
                           prose_end=prose_end)

    def prose_inert(self) -> re.Pattern[str] | None:
        """In prose only the start marker's first character can begin anything (``next_marker``)."""
        return without(self.start[0]) if self.start else None

    def _opens_call(self, text: str, body: int, *, final: bool) -> bool | None:
        """Whether the marker ending at ``body`` opens a call (None: too early to say)."""
        return True

    def _block(self, text: str, body: int, *, final: bool, errors: list[str]) -> tuple[list[ToolCallPart], int | None]:
        """The calls of the block whose text starts at ``body`` and where they end (None: cut off
        while streaming). :class:`JsonError` when the block is malformed."""
        raise NotImplementedError

    def _after_block(self, text: str, end: int, *, final: bool, errors: list[str], out: ContentBuilder,
                     bad: list[tuple[int, int | None]]) -> tuple[int, bool]:
        """Where content resumes after a block's calls ended at ``end``, and whether the block is
        closed there (what follows cannot change it)."""
        return end, True


class SectionToolParser(BlockToolParser):
    """A section (``start`` .. ``end``) of calls, each ``call_open`` + header + JSON arguments +
    closing text (DeepSeek, Kimi K2). A family reads its header (:meth:`_header`). A section
    the text cuts off keeps the calls it completed; no ``end`` after complete calls at the
    final parse still leaves them calls. A section opener repeated inside the section (DeepSeek
    V3.1 writes ``<｜tool▁calls▁begin｜>`` again before its second call) is skipped."""

    call_open: ClassVar[str]

    def _header(self, text: str, p: int, *, final: bool) -> tuple[str | None, int | None, str]:
        """The call's name (None: not known yet), where its arguments start (None: cut off while
        streaming) and the text that closes the call; :class:`JsonError` when malformed."""
        raise NotImplementedError

    def _block(self, text: str, body: int, *, final: bool, errors: list[str]) -> tuple[list[ToolCallPart], int | None]:
        calls: list[ToolCallPart] = []
        p = body
        while True:
            p = skip_ws(text, p)
            if text.startswith(self.call_open, p):
                try:
                    call, end = self._call(text, p + len(self.call_open), final=final)
                except JsonError:
                    if not calls or not final:
                        raise
                    errors.append(f"{self.name}: the text ends inside a tool call at offset {p}; kept as content")
                    return calls, p
                calls.append(call)
                if end is None:
                    return calls, None
                p = end
            elif text.startswith(self.end, p):
                if not calls:
                    raise JsonError("a tool-call section without calls", p)
                return calls, p + len(self.end)
            elif text.startswith(self.start, p):
                p += len(self.start)  # the opener again, before the next call: the section goes on
            elif not final and (self.call_open.startswith(text[p:]) or self.end.startswith(text[p:])
                                or self.start.startswith(text[p:])):
                return calls or [ToolCallPart(None, "", False)], None
            elif calls and p >= len(text):
                return calls, p  # no closing marker at the end: the calls still stand
            else:
                raise JsonError(f"expected {self.call_open} or {self.end}", p)

    def _call(self, text: str, p: int, *, final: bool) -> tuple[ToolCallPart, int | None]:
        """The call whose header starts at ``p`` and where it ends (None: cut off while streaming)."""
        name, q, closing = self._header(text, p, final=final)
        if q is None:
            return ToolCallPart(name, "", False), None
        call, end = named_arguments(text, name, skip_ws(text, q), final=final)
        if end is None:
            return call, None
        r = end if closing[:1].isspace() else skip_ws(text, end)
        if text.startswith(closing, r):
            return call, r + len(closing)
        if not final and closing.startswith(text[r:]):
            return call, None  # the closing marker is still to come
        if final and r >= len(text):
            return call, r  # cut right after the arguments: the call stands
        raise JsonError(f"expected {closing!r} after the arguments", r)

