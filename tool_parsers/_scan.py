"""Scanning JSON and markers in text that may stop at any character.

Every parser re-reads the whole text on each step, so these helpers answer three-way:
a value is *complete* (its end index), *cut off* (``None``: the text stops inside it and
could still become valid), or *invalid* (:class:`JsonError`: no continuation can fix it).
"Invalid" is therefore final even while streaming, which lets parsers decide early.
"""
from __future__ import annotations

import json
import json.scanner
import re
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = [
    "JsonError",
    "ScanCache",
    "OpenValue",
    "ObjectScan",
    "ArrayScan",
    "skip_ws",
    "scan_value",
    "scan_object",
    "scan_array",
    "partial_marker_start",
    "marked_name_end",
    "decode_string",
    "CallObject",
    "scan_call_object",
    "unwrap_string_arguments",
]

_WS = " \t\n\r"
_WS_RE = re.compile(r"[ \t\n\r]*")
# Body of a JSON string up to (not including) the closing quote or the first bad char.
_STRING_BODY = re.compile(r'(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*')
_STRING_BREAK = re.compile(r'["\\\x00-\x1f]')  # what a string body does not take as it is
# A string body that stops inside an escape ("\\" or "\\u12" at the very end).
_PARTIAL_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?\Z")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_PREFIX = re.compile(r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?)?\Z")
_LITERALS = {"t": "true", "f": "false", "n": "null"}


class _Constant(Exception):
    """NaN, Infinity: Python's JSON reader takes them, JSON does not."""


def _no_constant(name: str) -> object:
    raise _Constant(name)


# Python's JSON scanner (C where built): a whole object or array is read in C, many times faster than
# the scan below; anything it does not take (cut off, invalid, a constant, too deep) goes to the scan,
# which alone decides (tests/unit/test_tool_parsers.py checks both give the same answers).
_READER = json.JSONDecoder(parse_constant=_no_constant)
_WHOLE: Callable[[str, int], tuple[object, int]] = json.scanner.make_scanner(_READER)  # type: ignore[arg-type]
_NOT_WHOLE = (StopIteration, ValueError, _Constant, RecursionError)
WHOLE_IN_C = True  # tests turn it off to compare with the scan alone
_RESUME_SHORT = 32  # characters a resumed scan reads more cheaply than the C reader reads the whole value


class JsonError(ValueError):
    """The text cannot be (the start of) valid JSON; ``pos`` is where it went wrong."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(f"{message} at offset {pos}")
        self.pos = pos


def skip_ws(text: str, pos: int) -> int:
    """Index of the first non-whitespace character at or after ``pos``."""
    return _WS_RE.match(text, pos).end()  # type: ignore[union-attr]


def _scan_string(text: str, pos: int, resume: int | None = None) -> int | None:
    # text[pos] == '"'; ``resume``: where an earlier scan of this string stopped (see _string_stop)
    body_end = _STRING_BODY.match(text, resume or pos + 1).end()  # type: ignore[union-attr]
    if body_end < len(text) and text[body_end] == '"':
        return body_end + 1
    if body_end == len(text) or _PARTIAL_ESCAPE.match(text, body_end):
        return None
    raise JsonError("invalid character in JSON string", body_end)


def _string_stop(text: str, pos: int, resume: int | None) -> int:
    """Where scanning the cut-off string at ``pos`` may resume once the text grows: the end
    of its valid body (a trailing partial escape is re-read)."""
    return _STRING_BODY.match(text, resume or pos + 1).end()  # type: ignore[union-attr]


def _scan_scalar(text: str, pos: int) -> int | None:
    ch = text[pos]
    if ch == '"':
        return _scan_string(text, pos)
    literal = _LITERALS.get(ch)
    if literal is not None:
        if text.startswith(literal, pos):
            return pos + len(literal)
        if literal.startswith(text[pos:]):
            return None
        raise JsonError(f"expected {literal!r}", pos)
    if ch == "-" or ch.isdigit():
        match = _NUMBER.match(text, pos)
        end = match.end() if match else pos
        if end == len(text) or _NUMBER_PREFIX.match(text, pos):
            return None  # the number may still grow
        if match is None:
            raise JsonError("invalid number", pos)
        return end
    raise JsonError(f"unexpected character {ch!r}", pos)


def scan_value(text: str, pos: int) -> int | None:
    """End (exclusive) of the JSON value that starts exactly at ``pos``.

    Returns None when the text stops before the value does. Raises :class:`JsonError`
    when no continuation can make it valid. Iterative, so nesting depth is unlimited.
    Inside :meth:`ScanCache.active` it resumes where an earlier scan of the same value
    stopped (same result, less work when the text only grew).
    """
    n = len(text)
    if pos >= n:
        return None
    ch = text[pos]
    if ch not in "{[":
        return _scan_scalar(text, pos)
    cache = _cache_for(text)
    stack: list[str] = []
    i, expect, in_string = pos, "value", None
    hit = None if cache is None else cache.get(pos)
    if hit is not None and hit[1] is None:
        return pos + hit[0]
    # (a scan resumed near the end reads only the new part; one that stopped far back reads it all)
    if WHOLE_IN_C and (hit is None or n - (hit[1][3] or hit[1][2]) > _RESUME_SHORT):
        try:
            whole = _WHOLE(text, pos)[1]
        except _NOT_WHOLE:
            pass
        else:
            if cache is not None:
                cache[pos] = (whole - pos, None)
            return whole
    if hit is not None:
        saved_stack, expect, i, in_string = hit[1]
        stack = list(saved_stack)
    end = _scan_container(text, pos, stack, expect, i, cache, in_string)
    if cache is not None and end is not None:
        cache[pos] = (end - pos, None)
    return end


def _scan_container(
    text: str, pos: int, stack: list[str], expect: str, i: int, cache: dict | None, in_string: int | None = None
) -> int | None:
    n = len(text)
    # in_string: the token at i is a string whose body was already read up to there
    # expect: "value", "key_or_close", "key", "colon", "comma_or_close", "value_or_close"
    while True:
        i = skip_ws(text, i)
        skip, in_string = in_string, None  # only the first token may resume inside itself
        end: int | None = i + 1
        if i < n:
            ch = text[i]
            if expect in ("value", "value_or_close"):
                if expect == "value_or_close" and ch == "]":
                    stack.pop()
                elif ch in "{[":
                    stack.append("}" if ch == "{" else "]")
                    expect = "key_or_close" if ch == "{" else "value_or_close"
                    i += 1
                    continue
                elif ch == '"':
                    end = _scan_string(text, i, skip)
                else:
                    end = _scan_scalar(text, i)
            elif expect in ("key_or_close", "key"):
                if expect == "key_or_close" and ch == "}":
                    stack.pop()
                elif ch == '"':
                    end = _scan_string(text, i, skip)
                    if end is not None:
                        i, expect = end, "colon"
                        continue
                else:
                    raise JsonError("expected an object key", i)
            elif expect == "colon":
                if ch != ":":
                    raise JsonError("expected ':'", i)
                i += 1
                expect = "value"
                continue
            else:  # comma_or_close
                if ch == ",":
                    i += 1
                    expect = "key" if stack[-1] == "}" else "value"
                    continue
                if ch != stack[-1]:
                    raise JsonError(f"expected ',' or {stack[-1]!r}", i)
                stack.pop()
        if i >= n or end is None:
            # The token at i is unfinished: next time resume right here (inside it if a string).
            if cache is not None:
                resume = _string_stop(text, i, skip) if i < n and text[i] == '"' else None
                cache[pos] = (i - pos, (tuple(stack), expect, i, resume))
            return None
        i = end  # a value just ended
        if not stack:
            return i
        expect = "comma_or_close"


class ScanCache:
    """Per-stream memo of JSON scans, so re-parsing a growing text costs only the new part.

    Results are the same with or without it: entries are reused only while the text scanned
    still starts with the text they were computed from (checked once per new text, or
    asserted by the caller with ``grown=True``); otherwise they are dropped. Scans resume at
    the unfinished token, inside a cut-off string too. Use one per growing text::

        cache = ScanCache()
        with cache.active():
            parser.parse(text, final=False)
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[int, tuple[tuple[str, ...], str, int, int | None] | None]] = {}
        self._text: str | None = None
        self._grown = False

    def active(self, *, grown: bool = False) -> _Active:
        """Use the cache for scans in a ``with`` block. ``grown``: the caller guarantees the
        text now scanned extends the text scanned last time (skips the prefix check)."""
        self._grown = grown
        return _Active(self)

    def clear(self) -> None:
        self._entries.clear()
        self._text = None

    def grow_inside_string(self, old: str, new: str) -> bool:
        """The scan of ``new`` (``old`` plus more) from position 0, without scanning, when the last
        scan was of ``old`` and stopped at its very end inside a string (no escape pending), and what
        was added is all plain string text (no quote, backslash or control character): then ``new``
        ends inside the same string, and the cache says so as a scan would have. True when that
        held (``new`` is a valid, still open value); False: scan it. A long argument string then
        costs one regex search per token instead of a scan."""
        entry = self._entries.get(0) if old is self._text else None
        if entry is None or entry[1] is None:
            return False
        stack, expect, i, resume = entry[1]
        if resume != len(old) or _STRING_BREAK.search(new, len(old)) is not None:
            return False
        self._entries[0] = (entry[0], (stack, expect, i, len(new)))
        self._text = new
        return True

    def entries_for(self, text: str) -> dict | None:
        if text is not self._text:
            if self._text is not None and not (self._grown or text.startswith(self._text)):
                self._entries.clear()
            self._text, self._grown = text, False  # ``grown`` vouches for one new text only
        return self._entries


class OpenValue:
    """A JSON value (a call's arguments) still open, grown chunk by chunk without a parse: one per
    stream, its scan resumed where it stopped, so each chunk costs O(its length)."""

    __slots__ = ("_scan",)

    def __init__(self) -> None:
        self._scan = ScanCache()

    def grow(self, value: str, text: str) -> str | None:
        """``value + text`` when that is still an open, valid start of a JSON value; None when
        ``text`` ends the value or breaks it (a parser must then see it)."""
        grown = value + text
        if self._scan.grow_inside_string(value, grown):  # plain text in a string: no scan
            return grown
        try:
            with self._scan.active():
                return None if scan_value(grown, 0) is not None else grown
        except JsonError:
            return None


_ACTIVE: ContextVar[ScanCache | None] = ContextVar("gramserve_scan_cache", default=None)


class _Active:
    """The ``with`` block of :meth:`ScanCache.active` (a class: cheaper than a generator per token)."""

    __slots__ = ("_cache", "_token")

    def __init__(self, cache: ScanCache) -> None:
        self._cache = cache

    def __enter__(self) -> None:
        self._token = _ACTIVE.set(self._cache)

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.reset(self._token)


def _cache_for(text: str) -> dict | None:
    cache = _ACTIVE.get()
    return None if cache is None else cache.entries_for(text)


@dataclass(frozen=True)
class ObjectScan:
    """Top-level members of a JSON object that may be cut off.

    ``members`` maps each key whose value has started to ``(start, end)``; ``end`` is None
    while the value is cut off. ``end`` is the index after ``}`` (None while cut off).
    ``first_key`` is the first complete key, if any.
    """

    members: dict[str, tuple[int, int | None]]
    end: int | None
    first_key: str | None


def scan_object(text: str, pos: int) -> ObjectScan:
    """Scan the object starting at ``pos`` (``text[pos] == "{"``) member by member.

    Raises :class:`JsonError` when it cannot be a valid object. Keys seen twice keep
    their first value.
    """
    members: dict[str, tuple[int, int | None]] = {}
    first_key: str | None = None
    i = skip_ws(text, pos + 1)
    if i < len(text) and text[i] == "}":
        return ObjectScan(members, i + 1, None)
    while True:
        if i >= len(text):
            return ObjectScan(members, None, first_key)
        if text[i] != '"':
            raise JsonError("expected an object key", i)
        key_end = _scan_string(text, i)
        if key_end is None:
            return ObjectScan(members, None, first_key)
        key = text[i + 1 : key_end - 1]
        if "\\" in key:
            key = json.loads(text[i:key_end])
        if first_key is None:
            first_key = key
        i = skip_ws(text, key_end)
        if i >= len(text):
            return ObjectScan(members, None, first_key)
        if text[i] != ":":
            raise JsonError("expected ':'", i)
        i = skip_ws(text, i + 1)
        if i >= len(text):
            return ObjectScan(members, None, first_key)
        value_end = scan_value(text, i)
        members.setdefault(key, (i, value_end))
        if value_end is None:
            return ObjectScan(members, None, first_key)
        i = skip_ws(text, value_end)
        if i >= len(text):
            return ObjectScan(members, None, first_key)
        if text[i] == "}":
            return ObjectScan(members, i + 1, first_key)
        if text[i] != ",":
            raise JsonError("expected ',' or '}'", i)
        i = skip_ws(text, i + 1)


@dataclass(frozen=True)
class ArrayScan:
    """Items of a JSON array that may be cut off: ``(start, end|None)`` per started item."""

    items: tuple[tuple[int, int | None], ...]
    end: int | None


def scan_array(text: str, pos: int) -> ArrayScan:
    """Scan the array starting at ``pos`` (``text[pos] == "["``) item by item."""
    items: list[tuple[int, int | None]] = []
    i = skip_ws(text, pos + 1)
    if i < len(text) and text[i] == "]":
        return ArrayScan((), i + 1)
    while True:
        if i >= len(text):
            return ArrayScan(tuple(items), None)
        item_end = scan_value(text, i)
        items.append((i, item_end))
        if item_end is None:
            return ArrayScan(tuple(items), None)
        i = skip_ws(text, item_end)
        if i >= len(text):
            return ArrayScan(tuple(items), None)
        if text[i] == "]":
            return ArrayScan(tuple(items), i + 1)
        if text[i] != ",":
            raise JsonError("expected ',' or ']'", i)
        i = skip_ws(text, i + 1)


def partial_marker_start(text: str, markers: tuple[str, ...], start: int = 0) -> int:
    """Where a possible (proper) prefix of any marker begins at the end of ``text``.

    Returns ``len(text)`` when the end of the text cannot be the start of a marker. Only
    positions at or after ``start`` are considered.
    """
    n = len(text)
    best = n
    for marker in markers:
        j = text.find(marker[0], max(start, n - len(marker) + 1))
        while 0 <= j < best:
            if marker.startswith(text[j:]):
                best = j
                break
            j = text.find(marker[0], j + 1)
    return best


def decode_string(text: str, start: int, end: int) -> str | None:
    """The JSON string ``text[start:end]`` decoded, or None if that value is not a string."""
    if text[start] != '"':
        return None
    body = text[start + 1 : end - 1]
    return json.loads(text[start:end]) if "\\" in body else body


@dataclass(frozen=True)
class CallObject:
    """A ``{"name": ..., "arguments": ...}`` object as far as it goes.

    ``name`` is None until the name string is closed. ``arguments`` is the raw text of the
    arguments value so far ("" until it starts). ``has_arguments`` says an arguments key
    was seen. ``end`` is the index after ``}`` (None while cut off). ``first_key`` lets a
    parser reject objects that are plainly not calls early.
    """

    name: str | None
    arguments: str
    has_arguments: bool
    end: int | None
    first_key: str | None


def scan_call_object(
    text: str, pos: int, *, argument_keys: tuple[str, ...] = ("arguments", "parameters")
) -> CallObject:
    """Scan a call object at ``pos`` (``text[pos] == "{"``); JsonError when invalid,
    including a complete ``name`` value that is not a string."""
    scan = scan_object(text, pos)
    name: str | None = None
    if "name" in scan.members:
        start, end = scan.members["name"]
        if end is not None:
            name = decode_string(text, start, end)
            if name is None:
                raise JsonError("the call's \"name\" must be a string", start)
    arguments, has_arguments = "", False
    for key in argument_keys:
        if key in scan.members:
            start, end = scan.members[key]
            arguments = text[start:] if end is None else text[start:end]
            has_arguments = True
            break
    return CallObject(name, arguments, has_arguments, scan.end, scan.first_key)


def unwrap_string_arguments(arguments: str) -> str:
    """Arguments some models write as a JSON string (``"{\\"a\\": 1}"``): the object text
    inside when the string holds a JSON object; anything else unchanged."""
    if not arguments.startswith('"'):
        return arguments
    try:
        inner = json.loads(arguments)
        if isinstance(inner, str) and isinstance(json.loads(inner), dict):
            return inner
    except ValueError:
        pass
    return arguments


def marked_name_end(text: str, p: int, stop: str, bad: re.Pattern[str], *, final: bool) -> int | None:
    """Where the name at ``p`` ends (at ``stop``); None: cut off while streaming. :class:`JsonError`
    when a character ``bad`` matches comes first (a partial ``stop`` at the end is waited for)."""
    q = text.find(stop, p)
    hit = bad.search(text, p, len(text) if q < 0 else q)
    if hit is not None and not (q < 0 and not final and stop.startswith(text[hit.start():])):
        raise JsonError("expected a tool name", hit.start())
    if q < 0:
        if final:
            raise JsonError("the text ends inside the tool name", len(text))
        return None
    if q == p:
        raise JsonError("empty tool name", p)
    return q
