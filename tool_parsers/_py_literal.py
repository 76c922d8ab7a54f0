"""Python literals, as pythonic tool calls write their arguments (``f(city="Paris", days=3)``).

A scanner for one literal (strings with either quote, triple-quoted too; numbers; ``True`` /
``False`` / ``None`` and the JSON spellings vLLM accepts; lists, tuples, dicts and sets, which
become JSON arrays and objects), and the decoding of a string literal's text, also of one that
is still being written, so a string argument can stream as it is written: the decoded text of a
longer prefix always extends the shorter one's (an escape cut off at the end is held back).

Nothing is evaluated: values are read by this scanner, never by ``eval``. Values JSON cannot
carry (infinite numbers, complex numbers, bytes, lone surrogates) are errors, as in vLLM.
"""
from __future__ import annotations

import math
import re
import unicodedata
from typing import TypeAlias

from ._scan import JsonError, skip_ws

__all__ = ["scan_literal", "string_end", "string_prefix", "decode_literal", "is_open_string", "NAME_LITERALS", "PyValue",
           "Scalar"]

#: A literal as the scanner reads it: JSON data, except that a dict's keys are any scalar literal
#: (``{1: "a"}``), which ``json.dumps`` writes as strings.
Scalar: TypeAlias = "None | bool | int | float | str"
PyValue: TypeAlias = "None | bool | int | float | str | list[PyValue] | dict[Scalar, PyValue]"

NAME_LITERALS: dict[str, bool | None] = {"True": True, "False": False, "None": None,
                                         "true": True, "false": False, "null": None}  # (the JSON names: vLLM reads them too)
_NUMBER = re.compile(r"[+-]?(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][+-]?[\d_]*)?[A-Za-z0-9_]*")
_INT = re.compile(r"[+-]?\d(?:_?\d)*\Z")
_FLOAT = re.compile(r"[+-]?(?:\d(?:_?\d)*(?:\.(?:\d(?:_?\d)*)?)?|\.\d(?:_?\d)*)(?:[eE][+-]?\d(?:_?\d)*)?\Z")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SIMPLE = {"\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
           "v": "\v", "\n": ""}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}
_HEX = set("0123456789abcdefABCDEF")
_OCTAL = re.compile(r"[0-7]{1,3}")
_CLOSE = {"[": "]", "(": ")", "{": "}"}


def scan_literal(text: str, p: int, *, final: bool) -> tuple[PyValue, int] | None:
    """The literal at ``text[p]`` as a JSON value and where it ends; None: cut off by the end of
    the text while streaming (a number or name reaching the end may still grow). :class:`JsonError`
    when it is no literal (or cut off at the final parse)."""
    if p >= len(text):
        _cut(text, final, "a value")
        return None
    c = text[p]
    if c in "'\"":
        if not final and text[p:] == c * 2:
            return None  # an empty string, or a triple-quoted one opening
        end = string_end(text, p, final=final)
        if end is None:
            return None
        return decode_literal(text, p, end), end
    if c in _CLOSE:
        return _container(text, p, final=final)
    if c in "+-.0123456789":
        m = _NUMBER.match(text, p)
        if m is None:
            raise JsonError("expected a number", p)
        if m.end() == len(text) and not final:
            return None
        return _number(m.group(), p), m.end()
    m = _NAME.match(text, p)
    if m is None:
        raise JsonError("expected a Python literal", p)
    if m.end() == len(text) and not final:
        if any(n.startswith(m.group()) for n in NAME_LITERALS):
            return None
    if m.group() not in NAME_LITERALS:
        raise JsonError(f"{m.group()!r} is not a literal", p)
    return NAME_LITERALS[m.group()], m.end()


def _cut(text: str, final: bool, what: str) -> None:
    """The text ends here: an error at the final parse (else the caller waits for more)."""
    if final:
        raise JsonError(f"the text ends inside {what}", len(text))


def _number(token: str, p: int) -> int | float:
    if _INT.match(token):
        return int(token.replace("_", ""))
    if _FLOAT.match(token):
        value = float(token.replace("_", ""))
        if not math.isfinite(value):
            raise JsonError("a number JSON cannot carry", p)
        return value
    raise JsonError(f"{token!r} is not a number", p)


def _container(text: str, p: int, *, final: bool) -> tuple[PyValue, int] | None:
    """A list, tuple, dict or set literal (tuples and sets become lists, as in vLLM)."""
    close = _CLOSE[text[p]]
    items: list[PyValue] = []
    pairs: dict[Scalar, PyValue] = {}
    is_dict: bool | None = None if close == "}" else False
    i = skip_ws(text, p + 1)
    while True:
        if i >= len(text):
            _cut(text, final, "a value")
            return None
        if text[i] == close:
            if is_dict is None:  # {}
                is_dict = True
            return (pairs if is_dict else items), i + 1
        got = scan_literal(text, i, final=final)
        if got is None:
            return None
        value, i = got
        i = skip_ws(text, i)
        if is_dict is None:
            is_dict = i < len(text) and text[i] == ":"
            if i >= len(text):
                _cut(text, final, "a value")
                return None
        if is_dict:
            if i >= len(text):
                _cut(text, final, "a value")
                return None
            if text[i] != ":":
                raise JsonError("expected ':'", i)
            if isinstance(value, (dict, list)):
                raise JsonError("a dict key must be a scalar", i)
            got = scan_literal(text, skip_ws(text, i + 1), final=final)
            if got is None:
                return None
            pairs[value], i = got
            i = skip_ws(text, i)
        else:
            items.append(value)
        if i >= len(text):
            _cut(text, final, "a value")
            return None
        if text[i] == ",":
            i = skip_ws(text, i + 1)
        elif text[i] != close:
            raise JsonError(f"expected ',' or {close!r}", i)


def _quote(text: str, p: int) -> str:
    q = text[p]
    return q * 3 if text.startswith(q * 3, p) else q


def string_end(text: str, p: int, *, final: bool) -> int | None:
    """Where the string literal opened at ``p`` ends (after its closing quote); None: still open."""
    quote = _quote(text, p)
    i, n = p + len(quote), len(text)
    while i < n:
        j = text.find("\\", i)
        k = text.find(quote, i)
        if k < 0:
            break
        if 0 <= j < k:
            i = j + 2
            continue
        return k + len(quote)
    _cut(text, final, "a string")
    return None


def is_open_string(text: str, p: int) -> bool:
    """Whether a string literal opens at ``p``."""
    return p < len(text) and text[p] in "'\""


def decode_literal(text: str, p: int, end: int) -> str:
    """The value of the complete string literal ``text[p:end]``."""
    quote = _quote(text, p)
    decoded, _ = _decode(text, p + len(quote), end - len(quote), partial=False)
    return decoded


def string_prefix(text: str, p: int) -> str:
    """What the string literal opened at ``p`` and cut off by the end of the text holds so far:
    an escape cut off at the end (and, in a triple-quoted string, quotes that may close it) held back."""
    quote = _quote(text, p)
    if text[p:] == quote * 2:
        return ""
    stop = len(text)
    while len(quote) == 3 and stop > p + 3 and len(text) - stop < 2 and text[stop - 1] == quote[0]:
        stop -= 1
    decoded, _ = _decode(text, p + len(quote), stop, partial=True)
    return decoded


def _decode(text: str, start: int, stop: int, *, partial: bool) -> tuple[str, int]:
    """Python's escapes in ``text[start:stop]`` decoded; with ``partial`` an escape cut off at
    ``stop`` ends the text early. Returns the text and where decoding stopped."""
    out: list[str] = []
    i = start
    while i < stop:
        j = text.find("\\", i, stop)
        if j < 0:
            out.append(text[i:stop])
            i = stop
            break
        out.append(text[i:j])
        if j + 1 >= stop:
            if partial:
                return "".join(out), j
            raise JsonError("a string ends in a backslash", j)
        c = text[j + 1]
        if c in _SIMPLE:
            out.append(_SIMPLE[c])
            i = j + 2
        elif c in _HEX_DIGITS:
            k = j + 2 + _HEX_DIGITS[c]
            digits = text[j + 2 : min(k, stop)]
            if not set(digits) <= _HEX:
                raise JsonError(f"invalid \\{c} escape", j)
            if k > stop:
                if partial:
                    return "".join(out), j
                raise JsonError(f"invalid \\{c} escape", j)
            code = int(digits, 16)
            if 0xD800 <= code < 0xDC00 and c == "u":  # a surrogate pair: its second half must follow
                if partial and k + 6 > stop and text.startswith("\\u"[: stop - k], k):
                    return "".join(out), j
                low = text[k + 2 : k + 6] if text.startswith("\\u", k) and k + 6 <= stop else ""
                if len(low) != 4 or not set(low) <= _HEX or not 0xDC00 <= int(low, 16) < 0xE000:
                    raise JsonError("a lone surrogate", j)
                code = 0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00)
                k += 6
            if code > 0x10FFFF or 0xD800 <= code < 0xE000:
                raise JsonError("a character JSON cannot carry", j)
            out.append(chr(code))
            i = k
        elif c in "01234567":
            m = _OCTAL.match(text, j + 1, min(j + 4, stop))
            assert m is not None
            if partial and m.end() == stop and len(m.group()) < 3:
                return "".join(out), j  # more digits may follow
            out.append(chr(int(m.group(), 8)))
            i = m.end()
        elif c == "N":
            close = text.find("}", j + 2, stop)
            if text.startswith("{", j + 2) and close >= 0:
                try:
                    out.append(unicodedata.lookup(text[j + 3 : close]))
                except KeyError:
                    raise JsonError("unknown \\N{...} name", j) from None
                i = close + 1
            elif partial and (j + 2 >= stop or (text[j + 2] == "{" and close < 0)):
                return "".join(out), j
            else:
                raise JsonError("invalid \\N escape", j)
        else:  # an unknown escape stays as written (Python's rule)
            out.append("\\" + c)
            i = j + 2
    return "".join(out), i
