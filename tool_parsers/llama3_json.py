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

Malformed calls: invalid JSON (or text ending inside an object at the final parse) makes
the text from that object to the end content, and ``errors`` says why. Calls before it
stay. Text after the calls that is not another call is content.
"""
from __future__ import annotations

import re
from typing import ClassVar

from ._scan import CallObject, JsonError, scan_call_object, skip_ws
from .base import CallFormat, ModelFamily, ParsedTools, ToolCallPart, ToolParser

__all__ = ["Llama3JsonToolParser", "FAMILIES"]

_CALL_KEYS = ("name", "parameters", "arguments")


class Llama3JsonToolParser(ToolParser):
    """JSON objects at the start of the output, ``;``-separated."""

    name: ClassVar[str] = "llama3_json"
    start: ClassVar[str] = "<|python_tag|>"  # optional; calls may also start with "{"
    end: ClassVar[str] = ""
    format: ClassVar[CallFormat] = CallFormat(
        trigger='{"name": "', section_begin="", call_begin='{"name": "', name_end='", "parameters": ',
        # bare JSON: a call is found only at the start of the output
        call_end="}", separator="; ", section_end="", calls_follow_text=False)

    def parse(self, text: str, *, final: bool) -> ParsedTools:
        p = skip_ws(text, 0)
        tagged = text.startswith(self.start, p)
        if tagged:
            p = skip_ws(text, p + len(self.start))
        elif not final and self.start.startswith(text[p:]):
            return ParsedTools("")  # whitespace or a partial tag: wait
        plain = text.replace(self.start, "", 1) if tagged else text  # if no call here
        if p >= len(text):
            return ParsedTools(plain if final else "")
        if text[p] != "{":
            return ParsedTools(plain)

        calls: list[ToolCallPart] = []
        errors: list[str] = []

        def rest(p: int) -> str:  # content from the object at p on (all of it if first)
            return text[p:] if calls else plain

        while True:
            try:
                obj = scan_call_object(text, p)
            except JsonError as exc:
                errors.append(f"{self.name}: malformed tool call at offset {p} ({exc}); kept as content")
                return ParsedTools(rest(p), tuple(calls), tuple(errors))
            if not _may_be_call(obj):
                return ParsedTools(rest(p), tuple(calls), tuple(errors))
            if obj.end is None:
                if final:
                    errors.append(f"{self.name}: the text ends inside a tool call at offset {p}; kept as content")
                    return ParsedTools(rest(p), tuple(calls), tuple(errors))
                name = obj.name if obj.has_arguments else None
                calls.append(ToolCallPart(name, obj.arguments, False))
                return ParsedTools("", tuple(calls), tuple(errors))
            calls.append(ToolCallPart(obj.name, obj.arguments, True))
            q = skip_ws(text, obj.end)
            if q < len(text) and text[q] == ";":
                q = skip_ws(text, q + 1)
            if text.startswith(self.start, q):  # each call may carry its own <|python_tag|>
                q = skip_ws(text, q + len(self.start))
            elif not final and q < len(text) and self.start.startswith(text[q:]):
                return ParsedTools("", tuple(calls), tuple(errors))  # a partial tag: wait
            if q >= len(text):  # a separator or another call may follow
                return ParsedTools("", tuple(calls), tuple(errors))
            if text[q] != "{":
                return ParsedTools(text[q:], tuple(calls), tuple(errors))
            p = q


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
