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

from typing import ClassVar

from ._content import ContentBuilder, next_marker
from ._calls import call_array, call_objects
from ._scan import JsonError, partial_marker_start, skip_ws
from .base import CallFormat, Checkpoint, ModelFamily, ParsedTools, ToolCallPart, ToolParser

__all__ = ["HermesToolParser", "FAMILIES"]


class HermesToolParser(ToolParser):
    """``<tool_call>{json}</tool_call>`` blocks; text outside them is content."""

    name: ClassVar[str] = "hermes"
    start: ClassVar[str] = "<tool_call>"
    end: ClassVar[str] = "</tool_call>"
    format: ClassVar[CallFormat] = CallFormat(
        trigger="<tool_call>", section_begin="", call_begin='<tool_call>\n{"name": "', name_end='", "arguments": ',
        call_end="}\n</tool_call>", separator="\n", section_end="")

    def parse(self, text: str, *, final: bool, resume: str | None = None) -> ParsedTools:
        out = ContentBuilder(resume=resume)
        calls: list[ToolCallPart] = []
        errors: list[str] = []
        bad: list[tuple[int, int | None]] = []
        checkpoint: Checkpoint | None = None
        pos = 0
        while (i := next_marker(text, self.start, pos, final=final, out=out)) is not None:
            checkpoint = out.checkpoint(i, len(calls), len(errors), at_marker=True) or checkpoint
            body = i + len(self.start)
            try:
                p = skip_ws(text, body)
                if p >= len(text):
                    if final:
                        raise JsonError("the text ends inside the call", len(text))
                    found, end = [ToolCallPart(None, "", False)], None
                elif text[p] == "[":  # several calls as one JSON array
                    found, end = call_array(text, p, final=final, who=self.name, errors=errors, unwrap=True)
                elif text[p] == "{":  # one call, or several one after another
                    found, end = call_objects(text, p, final=final, unwrap=True)
                else:
                    raise JsonError(f"expected '{{' after {self.start}", p)
            except JsonError as exc:
                errors.append(f"{self.name}: malformed tool call at offset {i} ({exc}); kept as content")
                stop = text.find(self.end, min(exc.pos, len(text)))
                if stop < 0:
                    cut = len(text) if final else partial_marker_start(text, (self.end,), body)
                    out.add(text[body:cut].lstrip())
                    bad.append((i, len(text) if final else None))
                    break
                out.add(text[body:stop].lstrip())
                pos = stop + len(self.end)
                bad.append((i, pos))
                continue
            out.call()
            calls.extend(found)
            if end is None:  # cut off while streaming
                break
            pos, closed = self._after_call(text, end, final=final, errors=errors, out=out, bad=bad)
            if closed:
                checkpoint = out.checkpoint(pos, len(calls), len(errors)) or checkpoint
        else:
            checkpoint = out.tail_checkpoint(text, pos, len(calls), len(errors)) or checkpoint
        return ParsedTools(out.result(final=final), tuple(calls), tuple(errors), checkpoint, tuple(bad))

    def _after_call(self, text: str, obj_end: int, *, final: bool, errors: list[str], out: ContentBuilder,
                    bad: list[tuple[int, int | None]]) -> tuple[int, bool]:
        """Where content resumes after a call's JSON: past the end marker (text between the
        JSON and the marker is returned as content, never dropped); and whether the call is
        closed there (what follows cannot change it). Such text is a malformed region in
        ``bad`` (it may be a further call of the block that broke)."""
        q = skip_ws(text, obj_end)
        if text.startswith(self.end, q):
            return q + len(self.end), True
        if self.end.startswith(text[q:]):  # end marker (or nothing) still to come
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


FAMILIES = (
    ModelFamily(name="hermes", parser=HermesToolParser(), template="hermes",
                detect=lambda template: "<tool_call>" in template, detect_order=10),
)
