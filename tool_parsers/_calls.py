"""Runs of JSON call objects, shared by the families that write calls as JSON objects.

Models put several calls where one was expected: ``{...}{...}`` or ``{...}, {...}`` inside
one hermes block or behind one Mistral marker, or a JSON array of calls (Mistral's own
format, and some hermes models' habit). Every call of such a run comes out, and a run the
text cuts off keeps the calls it completed (the cut call's text becomes content).
"""
from __future__ import annotations

from collections.abc import Sequence

from ._scan import CallObject, JsonError, scan_array, scan_call_object, scan_value, skip_ws, unwrap_string_arguments
from .base import ToolCallPart

__all__ = ["call_array", "call_objects", "named_arguments"]

_SEPARATOR = ","  # between two call objects of one run (whitespace always allowed)


def _part(obj: CallObject, *, unwrap: bool) -> ToolCallPart:
    """A call part from a scanned object (complete when the object is)."""
    if obj.end is None:
        # Arguments written as a JSON string are unwrapped once complete: hold them till then.
        return ToolCallPart(obj.name, "" if unwrap and obj.arguments.startswith('"') else obj.arguments, False)
    if not obj.has_arguments:
        return ToolCallPart(obj.name, "{}", True)
    return ToolCallPart(obj.name, unwrap_string_arguments(obj.arguments) if unwrap else obj.arguments, True)


def call_objects(text: str, p: int, *, final: bool, unwrap: bool = False) -> tuple[list[ToolCallPart], int | None]:
    """The calls of the objects from ``p`` (``text[p] == "{"``), one after another, and where
    the last complete one ends (None: cut off while streaming; the list then ends with the
    call being written). The first object decides the run: invalid, nameless or (at the final
    parse) cut off, it raises :class:`JsonError`. A later object that is not a complete call
    ends the run before it (its text is the caller's to keep as content)."""
    calls: list[ToolCallPart] = []
    obj = scan_call_object(text, p)
    if obj.end is not None and obj.name is None:
        raise JsonError('the call has no "name"', p)
    if final and obj.end is None:
        raise JsonError("the text ends inside the call", len(text))
    while True:
        calls.append(_part(obj, unwrap=unwrap))
        if obj.end is None:
            return calls, None
        q = skip_ws(text, obj.end)
        if q < len(text) and text[q] == _SEPARATOR:
            q = skip_ws(text, q + 1)
            if q >= len(text) and not final:
                return calls, None  # another call may follow the separator
        if q >= len(text) or text[q] != "{":
            return calls, obj.end
        try:
            nxt = scan_call_object(text, q)
        except JsonError:
            return calls, obj.end
        if nxt.end is not None and nxt.name is None or (final and nxt.end is None):
            return calls, obj.end
        obj = nxt


def call_array(text: str, p: int, *, final: bool, who: str, errors: list[str],
               unwrap: bool = False) -> tuple[list[ToolCallPart], int | None]:
    """The calls of the JSON array at ``p`` (``text[p] == "["``) and where it ends (None: cut
    off while streaming). At the final parse a cut-off array keeps its complete calls and
    returns where its cut call starts (its text is then content, and ``errors`` says so), or
    the end of the text when only separators follow them. :class:`JsonError` when the array
    is invalid, holds something other than call objects, or is cut before its first call ends."""
    arr = scan_array(text, p)
    if not (final and arr.end is None):
        return _items(text, arr.items, unwrap=unwrap), arr.end
    done = [(start, end) for start, end in arr.items if end is not None]
    if not done:
        raise JsonError("the text ends inside the tool calls", len(text))
    cut = next((start for start, end in arr.items if end is None), None)
    if cut is None:
        return _items(text, done, unwrap=unwrap), len(text)
    errors.append(f"{who}: the text ends inside a tool call at offset {cut}; kept as content")
    return _items(text, done, unwrap=unwrap), cut


def _items(text: str, items: Sequence[tuple[int, int | None]], *,
           unwrap: bool) -> list[ToolCallPart]:
    calls = []
    for start, _ in items:
        if text[start] != "{":
            raise JsonError("each tool call must be an object", start)
        obj = scan_call_object(text, start)
        if obj.end is not None and obj.name is None:
            raise JsonError('a tool call has no "name"', start)
        calls.append(_part(obj, unwrap=unwrap))
    return calls


def named_arguments(text: str, name: str | None, q: int, *, final: bool) -> tuple[ToolCallPart, int | None]:
    """The call ``name`` whose JSON object arguments start at ``q`` (after a marker or name, as in
    Mistral v11+, DeepSeek, Kimi) and where they end (None: cut off while streaming)."""
    if q >= len(text):
        if final:
            raise JsonError("the text ends before the arguments", q)
        return ToolCallPart(name, "", False), None
    if text[q] != "{":
        raise JsonError("expected '{' after the tool name", q)
    end = scan_value(text, q)
    if end is None:
        if final:
            raise JsonError("the text ends inside the arguments", len(text))
        return ToolCallPart(name, text[q:], False), None
    return ToolCallPart(name, text[q:end], True), end
