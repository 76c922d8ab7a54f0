"""Llama 3.1 / 3.2 JSON tool calls.

Format: optional ``<|python_tag|>``, then ``{"name": "f", "parameters": {...}}``
(``"arguments"`` accepted too), several separated by ``;`` and/or whitespace. Only
output that *starts* with the tag or ``{`` holds calls; anything else is plain content.

Which objects are calls: an object is a call only if it has a string ``"name"`` and a
``"parameters"``/``"arguments"`` key. ``{"name": "f"}`` alone is content (upstream vLLM
behaviour: a JSON answer such as ``{"name": "Bob"}`` must not turn into a call), and an
object whose first key is neither is content as soon as that key is read. The name is
only reported once the parameters key has started, so nothing is streamed before the
object is known to be a call.

Malformed calls: invalid JSON makes the text from that object up to the next
``<|python_tag|>`` content (parsing resumes at the tag; without one, up to the end), and
``errors`` says why; text ending inside an object at the final parse is content too. Calls
before it stay. Text after the calls that is not another call is content.
"""
from __future__ import annotations

import re
from typing import ClassVar

from ._content import AFTER_CALL
from ._scan import CallObject, JsonError, partial_marker_start, scan_call_object, scan_value, skip_ws
from .base import CallFormat, Checkpoint, ModelFamily, ParsedTools, ToolCallPart, ToolParser

__all__ = ["Llama3JsonToolParser", "FAMILIES"]

_CALL_KEYS = ("name", "parameters", "arguments")
_CONTENT = "content"  # resume word: calls are over, the rest is content


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
        if resume == _CONTENT:  # settled: everything from here on is content
            return ParsedTools(text, (), (), Checkpoint(len(text), len(text), 0, 0, _CONTENT))
        calls: list[ToolCallPart] = []
        errors: list[str] = []
        bad: list[tuple[int, int | None]] = []
        content: list[str] = []
        checkpoint: Checkpoint | None = None
        n = len(text)

        def done(rest: str = "", *, settled: bool = False) -> ParsedTools:
            nonlocal checkpoint
            body = "".join(content) + rest
            if settled:  # no call can follow: the rest of the output is content
                checkpoint = Checkpoint(n, len(body), len(calls), len(errors), _CONTENT)
            return ParsedTools(body, tuple(calls), tuple(errors), checkpoint, tuple(bad))

        if resume == AFTER_CALL:
            p = self._next_call(text, 0, final=final)
            if p is None or p >= n or text[p] != "{":
                return done("" if p is None or p >= n else text[p:], settled=p is not None and p < n)
            plain = text
        else:
            p = skip_ws(text, 0)
            tagged = text.startswith(self.start, p)
            if tagged:
                p = skip_ws(text, p + len(self.start))
            elif not final and self.start.startswith(text[p:]):
                return ParsedTools("")  # whitespace or a partial tag: wait
            plain = text.replace(self.start, "", 1) if tagged else text  # if no call here
            if p >= n:
                return ParsedTools(plain if final else "")
            if text[p] != "{":
                return done(plain, settled=True)

        def rest(p: int, stop: int | None = None) -> str:  # content from the object at p (all before it if first)
            if calls or content or resume == AFTER_CALL:
                return text[p:stop]
            return plain[: None if stop is None else stop - (n - len(plain))]

        while True:
            try:
                obj = scan_call_object(text, p)
            except JsonError as exc:
                if _first_key(text, p) not in (None, *_CALL_KEYS):  # not a call (decided before it broke)
                    return done(rest(p), settled=True)
                # Malformed: content up to the next <|python_tag|> (where parsing resumes), if any.
                errors.append(f"{self.name}: malformed tool call at offset {p} ({exc}); kept as content")
                tag = text.find(self.start, min(max(exc.pos, p + 1), n))
                if tag < 0:
                    cut = n if final else partial_marker_start(text, (self.start,), p + 1)
                    bad.append((p, n if final else None))
                    return done(rest(p, cut))
                content.append(rest(p, tag))
                bad.append((p, tag))
                p = self._next_call(text, tag, final=final)
                if p is None or p >= n or text[p] != "{":
                    return done("" if p is None or p >= n else text[p:], settled=p is not None and p < n)
                continue
            if not _may_be_call(obj):
                return done(rest(p), settled=True)
            if obj.end is None:
                if final:
                    errors.append(f"{self.name}: the text ends inside a tool call at offset {p}; kept as content")
                    return done(rest(p))
                name = obj.name if obj.has_arguments else None
                calls.append(ToolCallPart(name, obj.arguments, False))
                return done()
            calls.append(ToolCallPart(obj.name, obj.arguments, True))
            checkpoint = Checkpoint(obj.end, len("".join(content)), len(calls), len(errors), AFTER_CALL)
            p = self._next_call(text, obj.end, final=final)
            if p is None or p >= n:  # a separator or another call may follow
                return done()
            if text[p] != "{":
                return done(text[p:], settled=True)

    def _next_call(self, text: str, q: int, *, final: bool) -> int | None:
        """After a call (or at a tag): past ``;``, whitespace and a ``<|python_tag|>`` to where the
        next call may start. None: a partial tag, wait."""
        q = skip_ws(text, q)
        if q < len(text) and text[q] == ";":
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


FAMILIES = (
    ModelFamily(name="llama3_json", parser=Llama3JsonToolParser(), template="llama3_json", detect=_detect,
                detect_order=30),
)
