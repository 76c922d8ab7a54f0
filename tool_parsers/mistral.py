"""Mistral tool calls, every tokenizer generation, one parser.

Shapes accepted after each ``[TOOL_CALLS]`` marker (by every variant):

* pre-v11: ``[TOOL_CALLS] [{"name": "f", "arguments": {...}}, ...]`` (a JSON array;
  ``"parameters"`` accepted; a call without arguments gets ``"{}"``; call objects without
  the brackets, ``{...}{...}`` or ``{...}, {...}``, too). An array the text cuts off keeps
  the calls it completed;
* v11: ``[TOOL_CALLS]f{...}``, each call behind its own marker;
* v13 (Magistral, Devstral): ``[TOOL_CALLS]f[ARGS]{...}``.

The families ``mistral`` / ``mistral_v11`` / ``mistral_v13`` share this one parser and
differ only by their ``format`` data (what a grammar should make the model write).

Malformed sections: when the text after a marker is not one of these shapes (invalid
JSON, an element without a string name, text ending inside it at the final parse), the
section's text up to the next marker (leading whitespace removed, marker dropped) is
content and ``errors`` says why. Several markers in one output are all parsed (upstream
vLLM raises on a second ``[TOOL_CALLS]``; a server should not).
"""
from __future__ import annotations

import hashlib
import re
from typing import ClassVar

from ._content import ContentBuilder, next_marker
from ._calls import call_array, call_objects, named_arguments
from ._scan import JsonError, partial_marker_start, skip_ws
from .base import CallFormat, Checkpoint, ModelFamily, ParsedTools, ToolCallPart, ToolParser

__all__ = ["MistralToolParser", "V11_FORMAT", "V13_FORMAT", "mistral_tool_call_id", "FAMILIES"]

_NAME = re.compile(r"[A-Za-z0-9_.\-]*")


class MistralToolParser(ToolParser):
    """``[TOOL_CALLS]`` sections; the format data describes the pre-v11 JSON array."""

    name: ClassVar[str] = "mistral"
    start: ClassVar[str] = "[TOOL_CALLS]"
    end: ClassVar[str] = ""
    args_marker: ClassVar[str] = "[ARGS]"  # optional between a v11+ name and its arguments
    format: ClassVar[CallFormat] = CallFormat(
        trigger="[TOOL_CALLS]", section_begin="[TOOL_CALLS] [", call_begin='{"name": "', name_end='", "arguments": ',
        call_end="}", separator=", ", section_end="]")

    def parse(self, text: str, *, final: bool, resume: str | None = None) -> ParsedTools:
        out = ContentBuilder(resume=resume)
        calls: list[ToolCallPart] = []
        errors: list[str] = []
        bad: list[tuple[int, int | None]] = []
        checkpoint: Checkpoint | None = None
        pos = 0
        while (i := next_marker(text, self.start, pos, final=final, out=out)) is not None:
            checkpoint = out.checkpoint(i, len(calls), len(errors), at_marker=True) or checkpoint
            body = skip_ws(text, i + len(self.start))
            try:
                section, end = self._section(text, body, final=final, errors=errors)
            except JsonError as exc:
                errors.append(f"{self.name}: malformed tool call at offset {i} ({exc}); kept as content")
                nxt = text.find(self.start, max(body, min(exc.pos, len(text))))
                if nxt < 0:
                    cut = len(text) if final else partial_marker_start(text, (self.start,), body)
                    out.add(text[body:cut])
                    bad.append((i, len(text) if final else None))
                    break
                out.add(text[body:nxt])
                bad.append((i, nxt))
                pos = nxt
                continue
            if section:
                out.call()
                calls.extend(section)
            if end is None:  # cut off while streaming
                break
            pos = end
            checkpoint = out.checkpoint(pos, len(calls), len(errors)) or checkpoint
        else:
            checkpoint = out.tail_checkpoint(text, pos, len(calls), len(errors)) or checkpoint
        return ParsedTools(out.result(final=final), tuple(calls), tuple(errors), checkpoint, tuple(bad))

    def _section(self, text: str, p: int, *, final: bool,
                 errors: list[str]) -> tuple[list[ToolCallPart], int | None]:
        """Calls of the section at ``p`` and where it ends (None: cut off)."""
        if p >= len(text):
            if final:
                raise JsonError("nothing after the marker", p)
            return [], None
        if text[p] == "[" and not text.startswith(self.args_marker, p):
            return call_array(text, p, final=final, who=self.name, errors=errors)
        if text[p] == "{":  # call objects without the array's brackets
            return call_objects(text, p, final=final)
        return self._named(text, p, final=final)

    def _named(self, text: str, p: int, *, final: bool) -> tuple[list[ToolCallPart], int | None]:
        q = _NAME.match(text, p).end()  # type: ignore[union-attr]
        if q >= len(text):
            if final:
                raise JsonError("the text ends inside the tool name", q)
            return [ToolCallPart(None, "", False)], None
        if q == p:
            raise JsonError("expected a tool name or '['", p)
        name = text[p:q]
        if text.startswith(self.args_marker, q):
            q += len(self.args_marker)
        elif self.args_marker.startswith(text[q:]) and not final:
            return [ToolCallPart(name, "", False)], None
        call, end = named_arguments(text, name, q, final=final)
        return [call], end


V11_FORMAT = CallFormat(  # [TOOL_CALLS]name{arguments}
    trigger="[TOOL_CALLS]", section_begin="", call_begin="[TOOL_CALLS]", name_end="", call_end="", separator="",
    section_end="")
V13_FORMAT = CallFormat(  # [TOOL_CALLS]name[ARGS]{arguments} (Magistral, Devstral)
    trigger="[TOOL_CALLS]", section_begin="", call_begin="[TOOL_CALLS]", name_end="[ARGS]", call_end="",
    separator="", section_end="")

_MARKERS = ("[TOOL_CALLS]", "[AVAILABLE_TOOLS]")
# v11 templates write the function name right after the marker: "[TOOL_CALLS]" + name.
_V11_TEMPLATE = re.compile(r"\[TOOL_CALLS\]\s*(?:['\"]\s*\+|\{\{)")
_ID = re.compile(r"[A-Za-z0-9]{9}")
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def mistral_tool_call_id(call_id: str) -> str:
    """Map any tool call id to the 9 alphanumeric characters Mistral models require.

    Ids that already fit are kept; others are hashed, so the same id always maps to the
    same short id (an assistant call and its tool result stay paired across requests)."""
    if _ID.fullmatch(call_id):
        return call_id
    number = int.from_bytes(hashlib.sha256(call_id.encode("utf-8")).digest()[:8], "big")
    chars = []
    for _ in range(9):
        number, digit = divmod(number, 62)
        chars.append(_BASE62[digit])
    return "".join(chars)


def _is_mistral(template: str) -> bool:
    return any(m in template for m in _MARKERS)


# One parser, three formats: the variants are data (what a grammar makes the model write).
FAMILIES = (
    ModelFamily(name="mistral_v13", parser=MistralToolParser(name="mistral_v13", format=V13_FORMAT),
                detect=lambda t: _is_mistral(t) and "[ARGS]" in t, detect_order=20, call_id=mistral_tool_call_id),
    ModelFamily(name="mistral_v11", parser=MistralToolParser(name="mistral_v11", format=V11_FORMAT),
                detect=lambda t: _is_mistral(t) and bool(_V11_TEMPLATE.search(t)), detect_order=21,
                call_id=mistral_tool_call_id),
    ModelFamily(name="mistral", parser=MistralToolParser(), template="mistral", detect=_is_mistral,
                detect_order=22, call_id=mistral_tool_call_id),
)
