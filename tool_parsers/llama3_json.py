"""Llama 3.1 / 3.2 JSON tool calls.

Format: optional ``<|python_tag|>``, then ``{"name": "f", "parameters": {...}}``
(``"arguments"`` accepted too), several separated by ``;`` (or ``,``) and/or whitespace. Calls start
the output (with the tag or a bare ``{``) or follow text behind a ``<|python_tag|>``
(``Let me check.<|python_tag|>{...}``: the text is content, the call a call); a bare ``{``
after text is content, and so is text behind a tag that opens no call (the tag dropped).

Which objects are calls: an object is a call only if it has a string ``"name"`` and a
``"parameters"``/``"arguments"`` key, in any order, beside any other keys (Meta's documented
Llama 3.1 output starts with ``"type": "function"``). ``{"name": "f"}`` alone is content
(upstream vLLM behaviour: a JSON answer such as ``{"name": "Bob"}`` must not turn into a call),
and an object whose first key is none of these (nor ``"type"``) is content as soon as that key
is read. The name is only reported once the parameters key has started, so nothing is streamed
before the object is known to be a call.

Malformed calls: invalid JSON makes the text from that object up to the next
``<|python_tag|>`` content (parsing resumes at the tag; without one, up to the end), and
``errors`` says why; text ending inside an object at the final parse is content too. Calls
before it stay. Text after the calls that is not another call is content.
"""
from __future__ import annotations

import re
from typing import ClassVar

from ._content import AFTER_CALL, without
from ._scan import CallObject, JsonError, partial_marker_start, scan_call_object, scan_value, skip_ws
from .base import CallFormat, Checkpoint, ModelFamily, ParsedTools, ToolCallPart, ToolParser

__all__ = ["Llama3JsonToolParser", "FAMILIES"]

_CALL_KEYS = ("name", "parameters", "arguments", "type")  # first keys of an object that may be a call
_CONTENT = "content"  # resume word: text, not calls (up to a <|python_tag|> that opens one)
_SEPARATORS = ";,"  # between two calls (Llama writes "; ", some models ", ")


class Llama3JsonToolParser(ToolParser):
    """JSON objects at the start of the output, ``;``-separated."""

    name: ClassVar[str] = "llama3_json"
    start: ClassVar[str] = "<|python_tag|>"  # optional; calls may also start with "{"
    end: ClassVar[str] = ""
    format: ClassVar[CallFormat] = CallFormat(
        trigger='{"name": "', section_begin="", call_begin='{"name": "', name_end='", "parameters": ',
        # bare JSON: a call is found only at the start of the output
        call_end="}", separator="; ", section_end="", calls_follow_text=False)

    def parse(self, text: str, *, final: bool, resume: str | None = None) -> ParsedTools:
        calls: list[ToolCallPart] = []
        errors: list[str] = []
        bad: list[tuple[int, int | None]] = []
        content: list[str] = []
        checkpoint: Checkpoint | None = None
        n = len(text)
        lead = ""  # text before the first object, kept as content if that object is not a call
        p: int | None = None  # where a call may start (at "{"); None: text, from q
        q = 0
        if resume == AFTER_CALL:
            p = self._next_call(text, 0, final=final)
            if p is None:
                return ParsedTools("")
            q = p
        elif resume != _CONTENT:
            p = skip_ws(text, 0)
            tag = p if text.startswith(self.start, p) else -1
            if tag >= 0:
                p = skip_ws(text, tag + len(self.start))
            elif not final and self.start.startswith(text[p:]):
                return ParsedTools("")  # whitespace or a partial tag: wait
            if p >= n:
                return ParsedTools(text.replace(self.start, "", 1) if final else "")
            lead = text[:p] if tag < 0 else text[:tag] + text[tag + len(self.start) : p]
            if text[p] != "{":  # plain text (what follows a leading tag is kept verbatim)
                content.append(text[:tag] if tag >= 0 else "")
                q = 0 if tag < 0 else tag + len(self.start)
                p, lead = None, ""

        while True:
            if p is None or p >= n or text[p] != "{":
                if p is not None and p >= n:  # a separator or another call may follow
                    return self._result(content, calls, errors, checkpoint, bad)
                # Text, not calls: content up to the next <|python_tag|> that opens a call.
                piece, p, stop = self._until_call(text, q, final=final)
                content.append(piece)
                checkpoint = Checkpoint(stop, len("".join(content)), len(calls), len(errors), _CONTENT)
                if p is None:  # (nothing held back: text without a tag's "<" stays content)
                    return self._result(content, calls, errors, checkpoint, bad, prose_end=stop == n)
            try:
                obj = scan_call_object(text, p)
                call = _may_be_call(obj)
            except JsonError as exc:
                if _first_key(text, p) not in (None, *_CALL_KEYS):  # not a call (decided before it broke)
                    call = False
                else:
                    # Malformed: content up to the next <|python_tag|> (where parsing resumes), if any.
                    errors.append(f"{self.name}: malformed tool call at offset {p} ({exc}); kept as content")
                    tag = text.find(self.start, min(max(exc.pos, p + 1), n))
                    stop = tag if tag >= 0 else n if final else partial_marker_start(text, (self.start,), p + 1)
                    content.append(lead + text[p:stop])
                    bad.append((p, tag if tag >= 0 else n if final else None))
                    if tag < 0:
                        return self._result(content, calls, errors, checkpoint, bad)
                    lead = ""
                    p = self._next_call(text, tag, final=final)
                    if p is None:
                        return self._result(content, calls, errors, checkpoint, bad)
                    q = p
                    continue
            if not call:  # text after all: it and what follows up to a call are content
                content.append(lead)
                q, lead = p, ""
                p = None
                continue
            if obj.end is None:
                if final:
                    errors.append(f"{self.name}: the text ends inside a tool call at offset {p}; kept as content")
                    content.append(lead + text[p:])
                else:
                    calls.append(ToolCallPart(obj.name if obj.has_arguments else None, obj.arguments, False))
                return self._result(content, calls, errors, checkpoint, bad)
            calls.append(ToolCallPart(obj.name, obj.arguments, True))
            lead = ""
            checkpoint = Checkpoint(obj.end, len("".join(content)), len(calls), len(errors), AFTER_CALL)
            p = self._next_call(text, obj.end, final=final)
            if p is None:
                return self._result(content, calls, errors, checkpoint, bad)
            q = p

    def prose_inert(self) -> re.Pattern[str] | None:
        """In text (once the output did not start with a call) only a ``<|python_tag|>`` opens one."""
        return without(self.start[0])

    @staticmethod
    def _result(content: list[str], calls: list[ToolCallPart], errors: list[str], checkpoint: Checkpoint | None,
                bad: list[tuple[int, int | None]], *, prose_end: bool = False) -> ParsedTools:
        return ParsedTools("".join(content), tuple(calls), tuple(errors), checkpoint, tuple(bad), prose_end=prose_end)

    def _until_call(self, text: str, q: int, *, final: bool) -> tuple[str, int | None, int]:
        """Content from ``q`` up to the next ``<|python_tag|>`` that opens a call: the text, where
        that call starts (None: no call yet) and where the content stops (what follows is held
        back while streaming). A tag that opens no call is dropped and the text goes on."""
        pieces = []
        while True:
            tag = text.find(self.start, q)
            if tag < 0:
                stop = len(text) if final else partial_marker_start(text, (self.start,), q)
                pieces.append(text[q:stop])
                return "".join(pieces), None, stop
            pieces.append(text[q:tag])
            p = skip_ws(text, tag + len(self.start))
            if p >= len(text) and not final:
                return "".join(pieces), None, tag  # what follows the tag decides: wait
            if p < len(text) and text[p] == "{":
                return "".join(pieces), p, tag
            q = tag + len(self.start)

    def _next_call(self, text: str, q: int, *, final: bool) -> int | None:
        """After a call (or at a tag): past ``;`` (or ``,``), whitespace and a ``<|python_tag|>`` to where the
        next call may start. None: a partial tag, wait."""
        q = skip_ws(text, q)
        if q < len(text) and text[q] in _SEPARATORS:
            q = skip_ws(text, q + 1)
        if text.startswith(self.start, q):  # each call may carry its own <|python_tag|>
            return skip_ws(text, q + len(self.start))
        if not final and q < len(text) and self.start.startswith(text[q:]):
            return None
        return q


def _first_key(text: str, p: int) -> str | None:
    """The object at ``p``'s first key when it is complete (even if the object is invalid later)."""
    try:
        return scan_call_object(text[: _key_end(text, p)], p).first_key
    except JsonError:
        return None


def _key_end(text: str, p: int) -> int:
    i = skip_ws(text, p + 1)
    if i < len(text) and text[i] == '"':
        try:
            end = scan_value(text, i)
        except JsonError:
            return i
        return i if end is None else end
    return i


def _may_be_call(obj: CallObject) -> bool:
    """False once the object is certainly not a call (see module docstring)."""
    if obj.first_key is not None and obj.first_key not in _CALL_KEYS:
        return False
    if obj.end is not None:
        return obj.name is not None and obj.has_arguments
    return True


_PARAMETERS = re.compile(r"[\"']?parameters[\"']?")


def _detect(template: str) -> bool:
    return "<|python_tag|>" in template or ("<|start_header_id|>" in template and bool(_PARAMETERS.search(template)))


_LLAMA3_JSON_WRITES = ("`{\"name\": \"f\", \"parameters\": {...}}`, several separated by `; `, at the start of the answer "
                       "(optional `<|python_tag|>`), or after text behind a `<|python_tag|>`; the keys in any order, "
                       "beside others (Meta's documented `{\"type\": \"function\", \"name\": ..., \"parameters\": ...}`)")

FAMILIES = (
    ModelFamily(name="llama3_json", parser=Llama3JsonToolParser(), template="llama3_json", detect=_detect,
                detect_order=30,
                models="Llama 3.1 / 3.2 / 3.3",
                writes=_LLAMA3_JSON_WRITES,
                detects="`<|python_tag|>` or Llama 3's `parameters`"),
)
