"""Mistral tool calls, every tokenizer generation, one parser.

Shapes accepted after each ``[TOOL_CALLS]`` marker (by every variant):

* pre-v11: ``[TOOL_CALLS] [{"name": "f", "arguments": {...}}, ...]`` (a JSON array;
  ``"parameters"`` accepted; a call without arguments gets ``"{}"``; call objects without
  the brackets, ``{...}{...}`` or ``{...}, {...}``, too; several arrays behind one marker,
  ``[{...}][{...}]``, all count). An array the text cuts off keeps the calls it completed;
* v11: ``[TOOL_CALLS]f{...}``, each call behind its own marker (``[TOOL_CALLS]f[ARGS]{...}``
  and mistral-common's v11 decoding shape ``[TOOL_CALLS]f[CALL_ID]abc123XYZ[ARGS]{...}`` too:
  the id is dropped, the server gives its own);
* v13 (Magistral, Devstral): ``[TOOL_CALLS]f[ARGS]{...}``.

The families ``mistral`` / ``mistral_v11`` / ``mistral_v13`` share this one parser and
differ only by their ``format`` data (what a grammar should make the model write). The
parse loop is the shared block loop (``_blocks.BlockToolParser``): a Mistral block has no
end marker and runs to the next ``[TOOL_CALLS]``.

Malformed sections: when the text after a marker is not one of these shapes (invalid
JSON, an element without a string name, text ending inside it at the final parse), the
section's text up to the next marker (leading whitespace removed, marker dropped) is
content and ``errors`` says why. Several markers in one output are all parsed (upstream
vLLM raises on a second ``[TOOL_CALLS]``; a server should not).
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from ._blocks import BlockToolParser
from ._calls import call_array, call_objects, named_arguments
from ._scan import JsonError, skip_ws
from .base import CallFormat, JsonObject, JsonValue, ModelFamily, ToolCallPart

__all__ = ["MistralToolParser", "V11_FORMAT", "V13_FORMAT", "mistral_tool_call_id", "FAMILIES"]

_NAME = re.compile(r"[A-Za-z0-9_.\-]*")
_CALL_ID = "[CALL_ID]"  # v11 history calls carry their id: [TOOL_CALLS]f[CALL_ID]id[ARGS]{...}
_ID_CHARS = re.compile(r"[A-Za-z0-9]*")


@dataclass(frozen=True)
class PreV11CallFormat(CallFormat):
    """The pre-v11 array, with or without a space after the marker: SentencePiece (v3) models write
    ``[TOOL_CALLS] [``, tekken ones (Nemo, Small 3.1) ``[TOOL_CALLS][``, as mistral-common encodes
    each; the pieces (with the space) are what prompts and round trips write."""

    def structural_tag(self, tools: Sequence[tuple[str, JsonValue]], *, mode: Literal["auto", "required"],
                       parallel: bool, arguments: Callable[[JsonValue], JsonObject]) -> JsonObject | None:
        calls: list[JsonValue] = [{"type": "sequence", "elements": [
            {"type": "const_string", "value": self.head(name)},
            arguments(schema), {"type": "const_string", "value": self.call_end}]} for name, schema in tools]
        call: JsonValue = calls[0] if len(calls) == 1 else {"type": "or", "elements": calls}
        more: JsonValue = {"type": "star", "content": {"type": "sequence", "elements": [
            {"type": "const_string", "value": self.separator}, call]}}
        inside: JsonObject = {"type": "sequence", "elements": [
            {"type": "regex", "pattern": r" ?"}, {"type": "const_string", "value": "["}, call, *([more] if parallel else [])]}
        tag: JsonObject = {"type": "tag", "begin": self.trigger, "content": inside, "end": self.section_end}
        if mode == "required":
            return tag
        return {"type": "triggered_tags", "triggers": [self.trigger], "tags": [tag], "stop_after_first": True}


class MistralToolParser(BlockToolParser):
    """``[TOOL_CALLS]`` sections; the format data describes the pre-v11 JSON array."""

    name: ClassVar[str] = "mistral"
    start: ClassVar[str] = "[TOOL_CALLS]"
    end: ClassVar[str] = ""  # a section runs to the next marker
    args_marker: ClassVar[str] = "[ARGS]"  # optional between a v11+ name and its arguments
    format: ClassVar[CallFormat] = PreV11CallFormat(
        trigger="[TOOL_CALLS]", section_begin="[TOOL_CALLS] [", call_begin='{"name": "', name_end='", "arguments": ',
        call_end="}", separator=", ", section_end="]")

    def _block(self, text: str, body: int, *, final: bool, errors: list[str]) -> tuple[list[ToolCallPart], int | None]:
        """Calls of the section after the marker and where they end (None: cut off)."""
        p = skip_ws(text, body)
        if p >= len(text):
            if final:
                raise JsonError("nothing after the marker", p)
            return [], None
        if text[p] == "[" and not text.startswith(self.args_marker, p):
            return self._arrays(text, p, final=final, errors=errors)
        if text[p] == "{":  # call objects without the array's brackets
            calls, end = call_objects(text, p, final=final)
            if end is not None and not final and skip_ws(text, end) >= len(text):
                return calls, None  # the text ends after an object: another may follow (as after an array)
            return calls, end
        return self._named(text, p, final=final)

    def _arrays(self, text: str, p: int, *, final: bool,
                errors: list[str]) -> tuple[list[ToolCallPart], int | None]:
        """One call array, or several in a row (``[{...}][{...}]``): a later array that is
        not calls ends the run before it (its text is then content)."""
        calls, end = call_array(text, p, final=final, who=self.name, errors=errors)
        while end is not None:
            q = skip_ws(text, end)
            r = skip_ws(text, q + 1) if text.startswith("[", q) else q
            if r >= len(text):  # the text ends after the array (or a '['): another may follow
                return calls, end if final else None
            if r == q or text[r] != "{":
                return calls, end
            more: list[str] = []
            try:
                found, end_more = call_array(text, q, final=final, who=self.name, errors=more)
            except JsonError:
                return calls, end
            errors.extend(more)
            calls, end = calls + found, end_more
        return calls, end

    def _named(self, text: str, p: int, *, final: bool) -> tuple[list[ToolCallPart], int | None]:
        """``f{...}``, ``f[ARGS]{...}`` or ``f[CALL_ID]id[ARGS]{...}``."""
        q = _NAME.match(text, p).end()  # type: ignore[union-attr]
        if q >= len(text):
            if final:
                raise JsonError("the text ends inside the tool name", q)
            return [ToolCallPart(None, "", False)], None
        if q == p:
            raise JsonError("expected a tool name or '['", p)
        name = text[p:q]
        if not final and (_CALL_ID.startswith(text[q:]) or self.args_marker.startswith(text[q:])):
            return [ToolCallPart(name, "", False)], None  # a marker is being written
        if text.startswith(_CALL_ID, q):
            q = _ID_CHARS.match(text, q + len(_CALL_ID)).end()  # type: ignore[union-attr]
            if not final and self.args_marker.startswith(text[q:]):
                return [ToolCallPart(name, "", False)], None
            if not text.startswith(self.args_marker, q):
                raise JsonError(f"expected {self.args_marker} after the call id", q)
        if text.startswith(self.args_marker, q):
            q += len(self.args_marker)
        call, end = named_arguments(text, name, q, final=final)
        return [call], end


# v11 (Small 3.2, Devstral Small 1.0): history calls carry [CALL_ID]id before [ARGS]; what the model writes is
# [TOOL_CALLS]name[ARGS]{arguments}, as mistral-common's own grammar makes every v11+ model write it (the
# form without [ARGS] is vLLM's text after its detokenizer dropped the control token; still read).
V11_FORMAT = CallFormat(
    trigger="[TOOL_CALLS]", section_begin="", call_begin="[TOOL_CALLS]", name_end="[ARGS]", call_end="",
    separator="", section_end="")
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
_MISTRAL_V11_WRITES = ("`[TOOL_CALLS]f[ARGS]{...}`, each call behind its own marker, as mistral-common's grammar makes "
                       "v11+ models write it; v11 history calls carry `[CALL_ID]id` before `[ARGS]` (read, id dropped); "
                       "`[TOOL_CALLS]f{...}` (vLLM's text once its detokenizer dropped `[ARGS]`) is read too; "
                       "mistral-common's own v11 and v13 templates are detected as `mistral_v13`")
_MISTRAL_WRITES = ("`[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {...}}, ...]` (tekken models write no space after the "
                   "marker: the grammar allows both); several arrays behind one marker are read")

FAMILIES = (
    ModelFamily(name="mistral_v13", reasoning="mistral", parser=MistralToolParser(name="mistral_v13", format=V13_FORMAT),
                detect=lambda t: _is_mistral(t) and "[ARGS]" in t, detect_order=20, call_id=mistral_tool_call_id,
                doc_row="mistral_v11",
                detects="`[TOOL_CALLS]` with `[ARGS]`"),
    ModelFamily(name="mistral_v11", reasoning="mistral", parser=MistralToolParser(name="mistral_v11", format=V11_FORMAT),
                detect=lambda t: _is_mistral(t) and bool(_V11_TEMPLATE.search(t)), detect_order=21,
                call_id=mistral_tool_call_id,
                models="Mistral v11+ (Small 3.2, Magistral, Devstral)",
                writes=_MISTRAL_V11_WRITES,
                detects="`[TOOL_CALLS]` followed by a Jinja expression (a v11 template's calls)"),
    ModelFamily(name="mistral", reasoning="mistral", parser=MistralToolParser(), template="mistral", detect=_is_mistral,
                detect_order=22, call_id=mistral_tool_call_id,
                models="Mistral pre-v11 (SentencePiece v3, the built-in template; tekken Nemo / Small 3.1)",
                writes=_MISTRAL_WRITES,
                detects="`[TOOL_CALLS]`"),
)
