"""Hermes / Qwen / SmolLM2 ChatML tool calls.

Format: ``<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>``, several in a
row. ``"parameters"`` is accepted in place of ``"arguments"``; a call without either
gets ``"{}"``. Arguments are returned as the raw JSON text the model wrote. Several calls
in one block (``{...}{...}``, ``{...}, {...}`` or a JSON array of calls) all come out.

Malformed calls: when a call's JSON is invalid (or the text ends inside it at the final
parse), the call is not a call: its text between the markers (leading whitespace
removed) is returned as content and ``errors`` says why. Invalid JSON is detected as
soon as it appears (no continuation could fix it), so streaming and non-streaming agree
unless the call's name had already been streamed.
"""
from __future__ import annotations

import re
from typing import ClassVar

from ._blocks import BlockToolParser
from ._calls import call_array, call_objects
from ._content import ContentBuilder
from ._scan import JsonError, skip_ws
from .base import CallFormat, ModelFamily, ToolCallPart

__all__ = ["HermesToolParser", "FAMILIES"]


class HermesToolParser(BlockToolParser):
    """``<tool_call>{json}</tool_call>`` blocks; text outside them is content."""

    name: ClassVar[str] = "hermes"
    start: ClassVar[str] = "<tool_call>"
    end: ClassVar[str] = "</tool_call>"
    format: ClassVar[CallFormat] = CallFormat(
        trigger="<tool_call>", section_begin="", call_begin='<tool_call>\n{"name": "', name_end='", "arguments": ',
        call_end="}\n</tool_call>", separator="\n", section_end="")
    # letters, digits, _, whitespace, ':' and ',' neither end the name's string nor open the arguments' value
    held_inert: ClassVar[re.Pattern[str] | None] = re.compile(r"[\w\s:,]+")

    def _block(self, text: str, body: int, *, final: bool, errors: list[str]) -> tuple[list[ToolCallPart], int | None]:
        p = skip_ws(text, body)
        if p >= len(text):
            if final:
                raise JsonError("the text ends inside the call", len(text))
            return [ToolCallPart(None, "", False)], None
        if text[p] == "[":  # several calls as one JSON array
            return call_array(text, p, final=final, who=self.name, errors=errors, unwrap=True)
        if text[p] == "{":  # one call, or several one after another
            return call_objects(text, p, final=final, unwrap=True)
        raise JsonError(f"expected '{{' after {self.start}", p)

    def _after_block(self, text: str, obj_end: int, *, final: bool, errors: list[str], out: ContentBuilder,
                    bad: list[tuple[int, int | None]]) -> tuple[int, bool]:
        """Where content resumes after a call's JSON: past the end marker (text between the
        JSON and the marker is returned as content, never dropped); and whether the call is
        closed there (what follows cannot change it). Such text is a malformed region in
        ``bad`` (it may be a further call of the block that broke)."""
        q = skip_ws(text, obj_end)
        if text.startswith(self.end, q):
            return q + len(self.end), True
        if self.end.startswith(text[q:]):  # end marker (or nothing) still to come
            if not final:
                out.wait = (obj_end, self.end, True)
            return len(text), False
        stop, nxt = text.find(self.end, q), text.find(self.start, q)
        if stop >= 0 and (nxt < 0 or stop < nxt):
            errors.append(f"{self.name}: text after the call's JSON kept as content: {text[q:stop]!r}")
            out.add(text[q:stop])
            bad.append((q, stop + len(self.end)))
            return stop + len(self.end), True
        if nxt >= 0:  # end marker missing, another call follows: the gap is content
            bad.append((q, nxt))
            return obj_end, True
        # Neither marker (yet): hold while streaming; at the end the rest is content.
        bad.append((q, len(text) if final else None))
        return (obj_end, False) if final else (len(text), False)


_HERMES_WRITES = ("`<tool_call>\\n{\"name\": \"f\", \"arguments\": {...}}\\n</tool_call>`, one block per call (several "
                  "objects, or a JSON array of them, in one block are parsed too)")

FAMILIES = (
    ModelFamily(name="hermes", reasoning="qwen3", parser=HermesToolParser(), template="hermes",
                detect=lambda template: "<tool_call>" in template, detect_order=10,
                models="ChatML models: SmolLM2 (the embedded default), Qwen2.5 / Qwen3, Hermes",
                writes=_HERMES_WRITES,
                detects="`<tool_call>`"),
)
