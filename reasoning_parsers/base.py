"""Splitting a reasoning block off the generated text.

A reasoning parser is a pure function of the whole text so far:
``split(text, final=...) -> (reasoning, rest)``. ``rest`` goes on to the tool parser /
content. Variants differ only by class data.

Conventions (checked against ``testdata/parsers/cases.json``):

* Whitespace followed by ``start`` at the beginning of the text is dropped with it.
  Nothing else is stripped: reasoning and rest keep their own whitespace.
* ``starts_open``: the prompt already opened the block, so text is reasoning until
  ``end`` even without ``start``. Without it only an explicit ``start`` opens a block.
* Reasoning ends at ``end`` (dropped), wherever it is: a ``tool_start`` marker inside the
  block is thinking, not a call. Only when the output ends without ``end`` does the first
  ``tool_start`` marker end the reasoning (kept: it begins the rest); until then, text from
  that marker on is held back. With neither, all of it is reasoning. This is the one rule for
  a call opened inside the thinking block, in every family: ``tool_start`` is the served
  tool-call family's own trigger (given at construction), so the call is never lost, and a
  call the model only drafts while thinking is not returned.
* While not final, text that may still become a marker is held back.
* Whether a request thinks: ``reasoning_effort: "none"`` turns it off; else the first of
  ``switches`` the request's ``chat_template_kwargs`` sets decides; else ``thinking_default``
  (the template's own default: Qwen3 thinks unless told not to, DeepSeek V3.1 only when told).
"""
from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import ClassVar

__all__ = ["ReasoningParser", "thinking_on"]


def thinking_on(chat_template_kwargs: Mapping[str, object] | None, reasoning_effort: str | None, *,
                switches: tuple[str, ...], default: bool) -> bool:
    """Whether a request with these fields thinks, for a template whose thinking is turned by
    ``switches`` (``chat_template_kwargs`` keys) and is ``default`` when none is set."""
    if reasoning_effort == "none":
        return False
    kwargs = chat_template_kwargs or {}
    for key in switches:
        if kwargs.get(key) is not None:
            return kwargs[key] is not False
    return default


class ReasoningParser:
    """``<think>...</think>``-style reasoning; subclasses set the class data.

    Class attributes:
      ``name``        registry name.
      ``start`` / ``end``  markers around the reasoning.
      ``starts_open`` the chat template opens the block in the prompt.
      ``aliases``     other registry names (vLLM's spellings of the same parser).
      ``switches`` / ``thinking_default``  see :func:`thinking_on`.

    ``thinking=False`` (e.g. ``chat_template_kwargs.enable_thinking=False``): the prompt
    did not open a block, so only an explicit ``start`` makes reasoning. ``tool_start``: the
    markers that end reasoning even without ``end`` (the tool-call family's trigger).
    """

    name: ClassVar[str] = "think"
    aliases: ClassVar[tuple[str, ...]] = ()
    start: ClassVar[str] = "<think>"
    end: ClassVar[str] = "</think>"
    starts_open: ClassVar[bool] = False
    switches: ClassVar[tuple[str, ...]] = ("enable_thinking", "thinking")
    thinking_default: ClassVar[bool] = True

    def __init__(self, *, thinking: bool = True, tool_start: tuple[str, ...] = ()) -> None:
        self.thinking = thinking
        self.open_at_start = self.starts_open and thinking
        self.tool_start = tuple(m for m in tool_start if m)

    def thinks(self, chat_template_kwargs: Mapping[str, object] | None, reasoning_effort: str | None) -> bool:
        """Whether a request with these fields thinks (see :func:`thinking_on`)."""
        return thinking_on(chat_template_kwargs, reasoning_effort, switches=self.switches,
                           default=self.thinking_default)

    def for_request(self, *, thinking: bool) -> ReasoningParser:
        """This parser for one request: ``self`` when it thinks as configured, else a copy with
        the same ``tool_start`` that expects no pre-opened block."""
        if thinking == self.thinking:
            return self
        return type(self)(thinking=thinking, tool_start=self.tool_start)

    def inert(self) -> re.Pattern[str] | None:
        """Chunks that only extend the reasoning: after a :meth:`split_at` inside the block that held
        nothing back (its position is the text's end, nothing after the block), a chunk all of this
        pattern is what the reasoning grows by, so a stream sends it without splitting again
        (MessageStream). Only the end marker or a ``tool_start`` marker ends the block, and neither
        can begin in a chunk without its first character. None: split every chunk."""
        return _without("".join(sorted({m[0] for m in (self.end, *self.tool_start)})))

    def split(self, text: str, *, final: bool) -> tuple[str, str]:
        """``(reasoning, rest)`` of the whole text so far."""
        reasoning, rest, _ = self.split_at(text, final=final)
        return reasoning, rest

    def split_at(self, text: str, *, final: bool, inside: bool = False) -> tuple[str, str, int | None]:
        """:meth:`split`, plus where it is settled: ``text[:pos]`` gave all of this reasoning,
        which every longer text's reasoning starts with, and ``split_at(text[pos:], inside=True)``
        gives the rest (so a stream need not re-read the block). ``inside``: the text starts
        within the block. None: nothing to settle (the block ended, or has not started)."""
        if inside:
            body = 0
        else:
            p = len(text) - len(text.lstrip())
            if text.startswith(self.start, p):
                body = p + len(self.start)
            elif not final and self.start.startswith(text[p:]):
                return "", "", None  # whitespace or a partial start marker: wait
            elif self.open_at_start:
                body = 0
            else:
                return "", text, None
        at = text.find(self.end, body)
        if at >= 0:  # the end marker decides, even with tool-call text drafted inside the block
            return text[body:at], text[at + len(self.end):], None
        tool_at = min((i for i in (text.find(m, body) for m in self.tool_start) if i >= 0), default=-1)
        if tool_at >= 0:
            # A call without the end marker: the model forgot it (the call is real) or is still
            # thinking (the end marker comes later). Only the end of the output can tell.
            return text[body:tool_at], text[tool_at:] if final else "", tool_at
        if final:
            return text[body:], "", None
        hold = self._hold_from(text, body)
        return text[body:hold], "", hold

    def _hold_from(self, text: str, body: int) -> int:
        """Start of a possible partial marker at the end of the text (or its length)."""
        n = len(text)
        hold = n
        for marker in (self.end, *self.tool_start):
            for k in range(min(len(marker) - 1, n - body), 0, -1):
                if text.endswith(marker[:k]):
                    hold = min(hold, n - k)
                    break
        return hold


@functools.lru_cache(maxsize=64)
def _without(chars: str) -> re.Pattern[str]:
    """Text without any of ``chars`` (one pattern per set of markers' first characters, per process)."""
    return re.compile(f"[^{re.escape(chars)}]+")
