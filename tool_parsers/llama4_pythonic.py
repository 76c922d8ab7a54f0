"""Pythonic tool calls: Llama 4 and Llama 3.2 (vLLM's ``llama4_pythonic`` and ``pythonic``).

Format (vLLM's Llama 4 pythonic template)::

    [get_weather(city="Paris", days=3), get_time(tz="UTC")]

The list starts the answer, bare or behind ``<|python_start|>`` (closed by an optional
``<|python_end|>``); after text, only a list behind ``<|python_start|>`` is calls (as SGLang reads
Llama 4), a bare one is text (as vLLM reads it). Arguments are keyword arguments whose values are
Python literals (strings with either quote, numbers, ``True``/``False``/``None``, lists, dicts),
read by :mod:`tool_parsers._py_literal`, never evaluated. The parser is bound to the request's
schemas (:meth:`with_tools`): a value is kept as written when it fits the schema, and a quoted
value whose schema allows no string is read as its type (the template writes history values
quoted: ``days="3"`` for an integer is 3). Arguments stream as OpenAI JSON that only grows: a
string as it is written, other values when they close. A call that breaks is content up to its
closing parenthesis (``errors`` says why) and the calls around it stay; a list the text cuts off
keeps the calls it completed.

XGrammar has no pythonic argument style, so the family owns its structural tag
(:class:`PythonicCallFormat`, grammars from :mod:`tool_parsers._pythonic_grammar`): the bare list,
and under ``auto`` the list or text in which no list opens.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from ._content import without
from ._py_literal import PyValue, is_open_string, scan_literal, string_end, string_prefix
from ._scan import JsonError, partial_marker_start, skip_ws
from ._xml_args import SchemaBound, _fits, _types, arguments_json, property_schema, streams_as_text, typed_value
from .base import CallFormat, Checkpoint, JsonObject, JsonValue, ModelFamily, ParsedTools, ToolCallPart

__all__ = ["PythonicToolParser", "PythonicCallFormat", "FAMILIES"]

PYTHON_START, PYTHON_END = "<|python_start|>", "<|python_end|>"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CLOSE = {"(": ")", "[": "]", "{": "}"}
_CONTENT, _CALLS, _AFTER = "content", "calls", "after"  # resume words: all text / in the list / after it


@dataclass(frozen=True)
class PythonicCallFormat(CallFormat):
    """The pieces (for prompts and round trips) and the grammar: each call an EBNF grammar typed by its schema."""

    def structural_tag(self, tools: Sequence[tuple[str, JsonValue]], *, mode: Literal["auto", "required"],
                       parallel: bool, arguments: Callable[[JsonValue], JsonObject]) -> JsonObject | None:
        from ._pythonic_grammar import UnsupportedSchema, call_grammar

        calls: list[JsonValue] = []
        for name, schema in tools:
            try:
                calls.append({"type": "grammar", "grammar": call_grammar(name, schema)})
            except UnsupportedSchema as exc:  # the constraint builder makes it a 400 naming the tools
                raise UnsupportedSchema(f"The tool {name!r} cannot be called in the pythonic format: {exc}.") from None
        one: JsonValue = calls[0] if len(calls) == 1 else {"type": "or", "elements": calls}
        more: list[JsonValue] = [{"type": "star", "content": {"type": "sequence", "elements": [
            {"type": "const_string", "value": self.separator}, one]}}] if parallel else []
        block: JsonObject = {"type": "sequence", "elements": [{"type": "const_string", "value": self.section_begin}, one,
                                                              *more, {"type": "const_string", "value": self.section_end}]}
        if mode == "required":
            return block
        # auto: the calls, or text in which no call list could open (calls only start the answer)
        return {"type": "or", "elements": [block, {"type": "grammar", "grammar": _TEXT}]}


# Text without "[", optional whitespace, a name, optional whitespace, "(": what the parser would
# read as the opening of a call list (markdown links, "[1]" and the like stay possible).
_TEXT = r"""root ::= "" | [^\[] root | "[" b1
b1 ::= "" | [ \t\r\n] b1 | [A-Za-z_] b2 | "[" b1 | [^\[ \t\r\nA-Za-z_] root
b2 ::= "" | [A-Za-z0-9_.\-] b2 | [ \t\r\n] b3 | "[" b1 | [^\[( \t\r\nA-Za-z0-9_.\-] root
b3 ::= "" | [ \t\r\n] b3 | "[" b1 | [^\[( \t\r\n] root
"""


class PythonicToolParser(SchemaBound):
    """A Python list of calls at the start of the answer."""

    name: ClassVar[str] = "llama4_pythonic"
    start: ClassVar[str] = PYTHON_START  # optional; the list may also start bare
    end: ClassVar[str] = PYTHON_END
    format: ClassVar[CallFormat] = PythonicCallFormat(
        trigger="[", section_begin="[", call_begin="", name_end="(", call_end=")", separator=", ", section_end="]",
        calls_follow_text=False, arguments_style="pythonic")

    def write_arguments(self, arguments: Mapping[str, JsonValue]) -> str:
        """Keyword arguments, each value a Python literal."""
        from ._pythonic_grammar import python_literal

        return ", ".join(f"{k}={python_literal(v)}" for k, v in arguments.items())

    def parse(self, text: str, *, final: bool, resume: str | None = None) -> ParsedTools:
        if resume == _CONTENT:
            return self._text(text, 0, final=final)
        if resume == _AFTER:
            return _after(text, 0, [], [], final=final)
        if resume == _CALLS:
            return self._calls(text, 0, final=final, opened_at=None)
        p = skip_ws(text, 0)
        if text.startswith(PYTHON_START, p):
            p = skip_ws(text, p + len(PYTHON_START))
        elif not final and PYTHON_START.startswith(text[p:]):
            return ParsedTools("")  # whitespace, or the tag still being written: wait
        opens = _opens_calls(text, p, final=final)
        if opens is None:
            return ParsedTools("")  # "[name" so far: a call list or text, the next characters say
        if not opens:
            return self._text(text, 0, final=final)
        return self._calls(text, skip_ws(text, p + 1), final=final, opened_at=0)

    def prose_inert(self) -> re.Pattern[str] | None:
        """In text (once the answer did not open with a call list) only a ``<|python_start|>`` opens one."""
        return without(PYTHON_START[0])

    def _text(self, text: str, q: int, *, final: bool) -> ParsedTools:
        """Text from ``q``: content, up to a ``<|python_start|>`` that opens a call list after it
        (Llama 4 may write the tag after text; a bare list only starts the answer). The tag itself
        is never content."""
        content: list[str] = []
        n = len(text)
        while True:
            tag = text.find(PYTHON_START, q)
            if tag < 0:
                stop = n if final else partial_marker_start(text, (PYTHON_START,), q)
                content.append(text[q:stop])
                done = "".join(content)  # (nothing held back: text without a tag's "<" stays content)
                return ParsedTools(done, checkpoint=Checkpoint(stop, len(done), 0, 0, _CONTENT), prose_end=stop == n)
            content.append(text[q:tag])
            p = skip_ws(text, tag + len(PYTHON_START))
            opens = _opens_calls(text, p, final=final)
            if opens is None:  # what follows the tag decides: wait
                done = "".join(content)
                return ParsedTools(done, checkpoint=Checkpoint(tag, len(done), 0, 0, _CONTENT))
            if opens:
                return self._calls(text, skip_ws(text, p + 1), final=final, opened_at=tag, head="".join(content))
            q = tag + len(PYTHON_START)

    def _calls(self, text: str, i: int, *, final: bool, opened_at: int | None, head: str = "") -> ParsedTools:
        """The calls from ``i``; ``opened_at``: where the list (or its tag) opened, None: resumed
        after a call; ``head``: the content before it.

        A call that breaks is content up to its closing parenthesis and the list goes on after it
        (as vLLM keeps the calls beside an unconvertible one); with no closing parenthesis, the
        rest of the text is content. While no call has been read, content runs from where the list
        opened, so a list without a single call is its whole text."""
        calls: list[ToolCallPart] = []
        errors: list[str] = []
        content: list[str] = [head]
        bad: list[tuple[int, int | None]] = []
        checkpoint: Checkpoint | None = None
        read = opened_at is None  # a call has been read (a resumed parse starts after one)
        text_from = opened_at or 0  # while none has: where the content not yet added starts
        after_call = opened_at is None  # at i: a separator or "]" (else a call)
        n = len(text)

        def result(tail: str = "") -> ParsedTools:
            return ParsedTools("".join(content) + tail, tuple(calls), tuple(errors), checkpoint, tuple(bad))

        while True:
            start = i
            try:
                if after_call:
                    i = skip_ws(text, i)
                    if i < n and text[i] == ",":
                        i = skip_ws(text, i + 1)
                        if i < n and text[i] != "]":
                            after_call = False
                            continue
                    if i >= n:
                        return result()  # cut: the calls stay
                    if text[i] != "]":
                        raise JsonError("expected ',' or ']' after a call", i)
                    if not read:  # not one call: the list is text
                        return result(text[text_from:])
                    return _after(text, i + 1, calls, errors, final=final, before=result())
                call, end = self._call(text, i, final=final)
            except JsonError as exc:
                errors.append(f"{self.name}: malformed tool call at offset {start} ({exc}); kept as content")
                skip = _call_end(text, start) if not after_call else None
                piece = text[start:skip].lstrip() if read else text[text_from:skip]
                content.append(_without_tag(piece) if not read and text_from == opened_at else piece)
                bad.append((start, skip if skip is not None or not final else n))
                if skip is None:
                    return result()
                i, after_call, text_from = skip, True, skip
                continue
            calls.append(call)
            if end is None:
                return result()
            read = True
            checkpoint = Checkpoint(end, len("".join(content)), len(calls), len(errors), _CALLS)
            i, after_call = end, True

    def _call(self, text: str, i: int, *, final: bool) -> tuple[ToolCallPart, int | None]:
        """The call at ``i`` (``name(k=v, ...)``) and where it ends; None: still being written."""
        m = _NAME.match(text, i)
        if m is None:
            if i >= len(text) and not final:
                return ToolCallPart(None, "", False), None
            raise JsonError("expected a function name", i)
        r = skip_ws(text, m.end())
        if r >= len(text):
            if final:
                raise JsonError("the text ends inside a tool call", len(text))
            return ToolCallPart(None, "", False), None
        if text[r] != "(":
            raise JsonError("expected '(' after the function name", r)
        return self._arguments(text, r + 1, m.group(), final=final)

    def _arguments(self, text: str, i: int, name: str, *, final: bool) -> tuple[ToolCallPart, int | None]:
        schema = self._schemas.get(name)
        done: list[tuple[str, JsonValue | PyValue]] = []
        n = len(text)

        def cut(open_text: tuple[str, str] | None = None) -> tuple[ToolCallPart, None]:
            if final:
                raise JsonError("the text ends inside a tool call", n)
            args = arguments_json(done, open_text, complete=False) if done or open_text else ""
            return ToolCallPart(name, args, False), None

        while True:
            i = skip_ws(text, i)
            if i >= n:
                return cut()
            if text[i] == ")":
                return ToolCallPart(name, arguments_json(done, complete=True), True), i + 1
            m = _KEY.match(text, i)
            if m is None:
                raise JsonError("expected a keyword argument", i)
            key = m.group()
            j = skip_ws(text, m.end())
            if j >= n:
                return cut()
            if text[j] != "=":
                raise JsonError("expected '=' (pythonic calls take keyword arguments)", j)
            v = skip_ws(text, j + 1)
            prop = property_schema(schema, key)
            got = scan_literal(text, v, final=final) if v < n else None
            if got is None:  # the value is still being written: a string streams as it is written
                return cut((key, string_prefix(text, v)) if is_open_string(text, v) and streams_as_text(prop) else None)
            value, i = got
            done.append((key, _typed(value, prop)))
            i = skip_ws(text, i)
            if i >= n:
                return cut()
            if text[i] == ",":
                i += 1
            elif text[i] != ")":
                raise JsonError("expected ',' or ')'", i)


def _typed(value: PyValue, schema: JsonValue) -> JsonValue | PyValue:
    """A value as written when it fits the schema; a string whose schema allows no string, read as its type."""
    if isinstance(value, str) and schema is not None and not _fits(value, _types(schema)):
        return typed_value(value, schema)
    return value


def _opens_calls(text: str, p: int, *, final: bool) -> bool | None:
    """Whether the text at ``p`` opens a call list (``[`` then ``name(``); None: not known yet."""
    if p >= len(text):
        return None if not final else False
    if text[p] != "[":
        return False
    q = skip_ws(text, p + 1)
    m = _NAME.match(text, q)
    if m is None:
        return None if q >= len(text) and not final else False
    r = skip_ws(text, m.end())
    if r >= len(text):
        return None if not final else False
    return text[r] == "("


def _without_tag(text: str) -> str:
    """Text that is not calls, without the python tags (special tokens, never content)."""
    return text.replace(PYTHON_START, "", 1) if text.lstrip().startswith(PYTHON_START) else text


def _after(text: str, p: int, calls: list[ToolCallPart], errors: list[str], *, final: bool,
           before: ParsedTools | None = None) -> ParsedTools:
    """After the list's ``]``: an optional ``<|python_end|>``, then text (whitespace only: layout).
    ``before``: what the list itself gave (content of broken calls, their regions)."""
    head = before.content if before else ""
    bad = before.malformed if before else ()
    checkpoint = Checkpoint(p, len(head), len(calls), len(errors), _AFTER)
    q = skip_ws(text, p)
    if text.startswith(PYTHON_END, q):
        p = q + len(PYTHON_END)
    elif not final and PYTHON_END.startswith(text[q:]):
        return ParsedTools(head, tuple(calls), tuple(errors), checkpoint, bad)
    rest = text[p:]
    return ParsedTools(head + (rest if rest.strip() else ""), tuple(calls), tuple(errors), checkpoint, bad)


def _call_end(text: str, i: int) -> int | None:
    """Where the call at ``i`` ends: after the parenthesis that closes its ``(`` (strings and
    brackets inside skipped); None: no such parenthesis (yet), or brackets that do not match."""
    p = text.find("(", i)
    if p < 0 or not _NAME.fullmatch(text[i:p].rstrip()):
        return None
    stack = [")"]
    p += 1
    while p < len(text):
        c = text[p]
        if c in "'\"":
            end = string_end(text, p, final=False)
            if end is None:
                return None
            p = end
            continue
        if c in _CLOSE:
            stack.append(_CLOSE[c])
        elif c in ")]}":
            if stack.pop() != c:
                return None
            if not stack:
                return p + 1
        p += 1
    return None


_TEMPLATE_MARK = re.compile(r"\[func_name1\(")


def _detect(template: str) -> bool:
    """vLLM's pythonic templates (Llama 4's and Llama 3.2's) show the call syntax as ``[func_name1(...``."""
    return bool(_TEMPLATE_MARK.search(template))


_LLAMA4_PYTHONIC_WRITES = ("`[get_weather(city=\"Paris\", days=3), get_time()]` at the start of the answer, optionally in "
                           "`<|python_start|>…<|python_end|>`; after text only behind `<|python_start|>` (a bare list after "
                           "text is text); values are Python literals (read by a scanner, never evaluated) typed by the "
                           "tool's schema and returned as JSON (a string streams as written, other values when they close; a"
                           " quoted value whose schema allows no string is read as its type); a call that breaks is content "
                           "up to its `)`, the calls around it stay; the grammar writes keyword arguments in the schema's "
                           "order, values as JSON in Python spelling (`True`/`False`/`None`); tools it cannot express "
                           "(top-level `anyOf`/`$ref`/…, property names that are not Python identifiers) are a 400 naming "
                           "`tools`. vLLM's Llama 4 template lists tools only from `custom_tools`: pass them in "
                           "`chat_template_kwargs` too")

FAMILIES = (
    ModelFamily(name="llama4_pythonic", parser=PythonicToolParser(), detect=_detect, detect_order=25,
                models="Llama 4 (Scout, Maverick), Llama 3.2 pythonic, ToolACE",
                writes=_LLAMA4_PYTHONIC_WRITES,
                detects="a pythonic call list `[func_name1(`"),
    # vLLM's name for the same format (Llama 3.2, ToolACE); the parser reads both
    ModelFamily(name="pythonic", parser=PythonicToolParser(name="pythonic"), detect=lambda t: False, detect_order=26,
                doc_row="llama4_pythonic"),
)
