"""A call's head as its family writes it: the chunks a stream need not parse while a call begins.

Between a call's start marker and the start of its arguments nothing can be sent: no content
(the text is inside a call), no arguments (they have not begun), and the name only once it is
whole. A grammar makes the model write that head exactly as the family's :class:`CallFormat`
says (hermes: ``<tool_call>\\n{"name": "`` NAME ``", "arguments": ``), and a tokenizer writes it in
many small chunks (the stand-in's vocabulary takes about 25 for hermes; a real one 8-12, of
which about 7 hold a quote, the characters ``ToolParser.held_inert`` cannot skip). So while the
text from the marker is still a prefix of that head, a chunk is not parsed (``MessageStream``,
``SKIP_HEAD``): the parse would find the same held call. A head left (another whitespace,
another key order, a name that needs escaping) only means the next chunk is parsed.

Two stages: before the name is known the head is ``call_begin`` (and then, while the name is
being written, chunks of the family's ``held_inert``); once a parse found the name whole, the
head is ``call_begin + NAME + name_end``, and the chunk that opens the arguments is parsed.

The name before it is whole (:meth:`CallHead.forced_name`): where the tools' grammar writes every
call's head as ``CallFormat.head(NAME)`` for one of the names it allows (:func:`grammar_heads`), the
name is known as soon as the text from the start marker fits the head of one name only (one tool:
at the start marker; ``get_weather`` and ``get_time``: at ``get_w``), and goes out then.
"""
from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from tool_parsers.base import CallFormat, ToolParser

__all__ = ["CallHead", "call_head", "grammar_heads"]


@dataclass(frozen=True, slots=True)
class CallHead:
    """The head expected of the call whose start marker begins at ``pos`` in the stream's tail."""

    pos: int
    text: str  # call_begin, or call_begin + NAME + name_end once the name is known
    name_end: str  # the family's name_end (appended when the name becomes known)
    named: bool = False

    def holds(self, tail: str, inert: re.Pattern[str] | None) -> bool:
        """Whether ``tail`` still ends inside this head: nothing of the call can be sent yet."""
        rest_len = len(tail) - self.pos
        if rest_len <= len(self.text):
            return tail.startswith(self.text[:rest_len], self.pos)
        # the name being written: the head so far, then only chunks that cannot end the name
        return (not self.named and inert is not None and tail.startswith(self.text, self.pos)
                and inert.fullmatch(tail, self.pos + len(self.text)) is not None)

    def with_name(self, tail: str, name: str) -> CallHead | None:
        """The head once a parse found the call's name whole (itself when named already); None where
        the text is not the family's canonical head (then every chunk is parsed)."""
        if self.named:
            return self
        if not tail.startswith(self.text + name, self.pos):
            return None
        return CallHead(self.pos, self.text + name + self.name_end, self.name_end, True)

    def forced_name(self, tail: str, heads: Sequence[tuple[str, str]]) -> tuple[str, CallHead] | None:
        """Where the grammar writes this call's head as one of ``heads`` ((name, its head), from
        :func:`grammar_heads`): the name, and the head it makes, once the text from the start marker
        fits one of them only; None while several fit (or none: not the grammar's text), or once named."""
        if self.named:
            return None
        written = tail[self.pos:]
        found: tuple[str, str] | None = None
        for name, text in heads:
            if text.startswith(written) if len(written) <= len(text) else written.startswith(text):
                if found is not None:
                    return None
                found = (name, text)
        return None if found is None else (found[0], CallHead(self.pos, found[1], self.name_end, True))

    def shifted(self, by: int) -> CallHead | None:
        """This head in a tail that lost its first ``by`` characters (a settled checkpoint)."""
        return CallHead(self.pos - by, self.text, self.name_end, self.named) if self.pos >= by else None


def call_head(parser: ToolParser, pos: int) -> CallHead | None:
    """The head of a call whose start marker (whole) begins at ``pos``: families whose every call
    begins with its start marker (``call_begin`` starts with ``start``, no section text before it)
    and ends its name with a marker; None for the others."""
    f = getattr(parser, "format", None)
    start = parser.start
    if f is None or not start or f.section_begin or not f.call_begin.startswith(start) or not f.name_end:
        return None
    return CallHead(pos, f.call_begin, f.name_end)


def grammar_heads(parser: ToolParser, names: Collection[str]) -> tuple[tuple[str, str], ...]:
    """(name, ``CallFormat.head(name)``) for each of ``names``, the names a tools' grammar lets a call
    take, where that grammar is assembled from the family's pieces (its calls begin
    ``call_begin + NAME + name_end``, exactly) and the family has a head (:func:`call_head`); else ().
    A family with its own grammar (channels, several ways to begin a call) names its calls from the parse."""
    f = getattr(parser, "format", None)
    if f is None or type(f).structural_tag is not CallFormat.structural_tag or call_head(parser, 0) is None:
        return ()
    names = tuple(names)
    return tuple(zip(names, f.heads(names), strict=True))
