"""The parse loop of every family whose calls sit in marked blocks (``<tool_call>...</tool_call>``):
find each block, keep the text between blocks as content, turn a block that breaks into content
up to its end marker, and checkpoint between blocks. A family supplies what a block holds."""
from __future__ import annotations

from ._content import ContentBuilder, malformed_block, next_marker
from ._scan import JsonError
from .base import Checkpoint, ParsedTools, ToolCallPart, ToolParser

__all__ = ["BlockToolParser"]


class BlockToolParser(ToolParser):
    """Blocks opened by ``start`` and closed by ``end``; :meth:`_block` reads one."""

    def parse(self, text: str, *, final: bool, resume: str | None = None) -> ParsedTools:
        out = ContentBuilder(resume=resume)
        calls: list[ToolCallPart] = []
        errors: list[str] = []
        bad: list[tuple[int, int | None]] = []
        checkpoint: Checkpoint | None = None
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
                resume_at = malformed_block(text, i, body, exc, end=self.end, final=final, who=self.name, out=out,
                                            errors=errors, bad=bad)
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
        else:
            checkpoint = out.tail_checkpoint(text, pos, len(calls), len(errors)) or checkpoint
        return ParsedTools(out.result(final=final), tuple(calls), tuple(errors), checkpoint, tuple(bad))

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
