"""Hermes / Qwen / SmolLM2 ChatML tool calls.

Format: ``<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>``, several in a
row. ``"parameters"`` is accepted in place of ``"arguments"``; a call without either
gets ``"{}"``. Arguments are returned as the raw JSON text the model wrote.

Malformed calls: when a call's JSON is invalid (or the text ends inside it at the final
parse), the call is not a call: its text between the markers (leading whitespace
removed) is returned as content and ``errors`` says why. Invalid JSON is detected as
soon as it appears (no continuation could fix it), so streaming and non-streaming agree
unless the call's name had already been streamed.
"""
from __future__ import annotations

from typing import ClassVar

from ._content import ContentBuilder, next_marker
from ._scan import CallObject, JsonError, partial_marker_start, scan_call_object, skip_ws, unwrap_string_arguments
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
                if p < len(text) and text[p] != "{":
                    raise JsonError(f"expected '{{' after {self.start}", p)
                obj = scan_call_object(text, p) if p < len(text) else None
                if obj is not None and obj.end is not None and obj.name is None:
                    raise JsonError('the call has no "name"', p)
                if final and (obj is None or obj.end is None):
                    raise JsonError("the text ends inside the call", len(text))
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
            end = self._calls_in_block(text, obj, final=final, calls=calls)
            if end is None:  # cut off while streaming
                break
            pos, closed = self._after_call(text, end, final=final, errors=errors, out=out, bad=bad)
            if closed:
                checkpoint = out.checkpoint(pos, len(calls), len(errors)) or checkpoint
        else:
            checkpoint = out.tail_checkpoint(text, pos, len(calls), len(errors)) or checkpoint
        return ParsedTools(out.result(final=final), tuple(calls), tuple(errors), checkpoint, tuple(bad))

    def _calls_in_block(self, text: str, obj: CallObject | None, *, final: bool,
                        calls: list[ToolCallPart]) -> int | None:
        """Append the block's calls: its first object and any further objects right after it
        (some models put several calls in one block). Returns where the last one ends (None:
        cut off while streaming)."""
        while True:
            if obj is None or obj.end is None:
                partial = obj.arguments if obj else ""
                # arguments written as a JSON string are unwrapped once complete: hold them till then
                calls.append(ToolCallPart(obj.name if obj else None, "" if partial.startswith('"') else partial,
                                          False))
                return None
            calls.append(ToolCallPart(obj.name, unwrap_string_arguments(obj.arguments) if obj.has_arguments
                                      else "{}", True))
            q = skip_ws(text, obj.end)
            if q >= len(text) or text[q] != "{":
                return obj.end
            try:
                nxt = scan_call_object(text, q)
            except JsonError:
                return obj.end  # not a call: _after_call returns its text as content
            if nxt.end is not None and nxt.name is None or (final and nxt.end is None):
                return obj.end
            obj = nxt

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
