"""Types shared by every tool-call parser.

A parser is a pure function of the text generated so far: ``parse(text, final=...)``.
It keeps no streaming state; the server diffs two successive parses (see
``server.chat.message_stream.compute_deltas``) to produce OpenAI deltas. So that a stream
does not re-read its whole text per token, a parse also names a :class:`Checkpoint`: a
point before which its result is settled, and how to parse on from there (``resume``).
The server parses only the text after the last checkpoint; a parse from the start gives
the same result.

Each parser also describes its output format as data (:class:`CallFormat`) so the
constraints code can build grammars / structural tags without the parser knowing about
them. Parsers never build constraints themselves.
"""
from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal, TypeAlias

from ._scan import JsonError, OpenValue, ScanCache, scan_value

__all__ = ["Checkpoint", "ToolCallPart", "ParsedTools", "ToolParser", "CallFormat", "ModelFamily", "OpenValue", "ScanCache",
           "JsonError", "scan_value", "Call", "JsonValue", "JsonObject"]

#: JSON data as ``json.loads`` returns it (the server's ``server.json_types`` says the same).
JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"

#: One call to write: the function's name and its arguments (JSON data).
Call = tuple[str, Mapping[str, JsonValue]]


@dataclass(slots=True)  # made per parse, per token: not frozen (4x slower to build); never changed after
class ToolCallPart:
    """One tool call as seen so far.

    ``arguments`` is the raw argument JSON text generated so far (a prefix of the final
    text while ``complete`` is False; ``"{}"`` once complete when the model wrote none).
    ``name`` is None until the whole name is known.
    """

    name: str | None
    arguments: str
    complete: bool


@dataclass(slots=True)  # made per parse: not frozen (as ToolCallPart); never changed after
class Checkpoint:
    """Where a parse is settled: ``text[:pos]`` gives ``content[:content]``,
    ``tool_calls[:calls]`` (complete calls) and ``errors[:errors]`` of this parse and of the
    parse of every longer text, final or not; ``parse(text[pos:], resume=resume)`` gives the
    rest of it. ``resume`` is the parser's own word for its state there (None: as at the
    start of the output)."""

    pos: int
    content: int
    calls: int
    errors: int
    resume: str | None = None
    reasoning: int = 0  # ``reasoning[:reasoning]`` of the parse is settled too (see ParsedTools.reasoning)


@dataclass(slots=True)  # one per parse, per token: not frozen (as ToolCallPart); never changed after
class ParsedTools:
    """Result of one parse: text outside calls, and the calls in order."""

    content: str
    tool_calls: tuple[ToolCallPart, ...] = ()
    # Set by the parser when a call could not be parsed; the call's text is then
    # returned as content and this says why, for logs and metrics.
    errors: tuple[str, ...] = field(default=())
    checkpoint: Checkpoint | None = None  # the furthest settled point (None: nothing settled)
    # ``(start, end)`` of each malformed call's region (its text kept as content); end is None
    # while the region is still open (streaming). A stream that already sent part of such a
    # call resumes parsing at ``end``.
    malformed: tuple[tuple[int, int | None], ...] = ()
    # Reasoning found by the tool parser itself, for formats whose channels carry it between
    # messages (Harmony's analysis channel); it follows the reasoning parser's. Only grows.
    reasoning: str = ""
    # ``(pos, marker, blank_first)``: the text from ``pos`` on (after any whitespace, when
    # ``blank_first``) is a proper prefix of ``marker``, held back and not read into this result:
    # the parse of any longer text for which that still holds is this one (a stream need not
    # parse it). None: no such promise.
    wait: tuple[int, str, bool] | None = None
    # The text ends in content: no call or block open, no marker start held (a stream may then send
    # text that cannot begin a call as content: ToolParser.prose_inert).
    prose_end: bool = False


@dataclass(frozen=True)
class CallFormat:
    """What a model writes for its tool calls, as literal pieces (for constraint builders).

    The text of ``k`` calls is::

        section_begin
        + call_begin + NAME + name_end + ARGUMENTS_JSON + call_end   (first call)
        + separator + call_begin + NAME + ...                           (more calls)
        + section_end

    ``NAME`` is the bare function name (inside a JSON string when ``call_begin`` ends
    with a quote), ``ARGUMENTS_JSON`` a JSON object. ``trigger`` is the text whose
    appearance in free text starts the tool-call section: a prefix of
    ``section_begin + call_begin`` (for an xgrammar structural tag: the trigger).
    Parsers accept more than this (other whitespace, key order, optional pieces); the
    format is what a grammar should make the model write.
    """

    trigger: str
    section_begin: str
    call_begin: str
    name_end: str
    call_end: str
    separator: str
    section_end: str
    # False when the parser finds calls only at the start of the output (no marker to find
    # them after free text): under "auto" the grammar then offers calls or text, not both.
    calls_follow_text: bool = True
    # How ARGUMENTS are written: XGrammar's JSONSchemaFormat style ("json", or an XML style
    # such as "qwen_xml" for <parameter=k>v</parameter>); the schema is enforced either way.
    arguments_style: str = "json"

    def head(self, name: str) -> str:
        """One call's text before its arguments, ``call_begin + NAME + name_end``: the name
        JSON-escaped where it sits in a JSON string (``call_begin`` ends with a quote)."""
        shown = json.dumps(name, ensure_ascii=False)[1:-1] if self.call_begin.endswith('"') else name
        return self.call_begin + shown + self.name_end

    def heads(self, names: Sequence[str]) -> tuple[str, ...]:
        """:meth:`head` of each of ``names``, in order."""
        return tuple(self.head(n) for n in names)

    def structural_tag(self, tools: Sequence[tuple[str, JsonValue]], *, mode: Literal["auto", "required"],
                       parallel: bool, arguments: Callable[[JsonValue], JsonObject]) -> JsonObject | None:
        """The family's own structural-tag ``format`` for calls of ``tools`` ((name, arguments
        schema) pairs), for formats the pieces above cannot describe (channels, pythonic calls,
        call indexes). ``arguments(schema)`` is the builder's format for one call's arguments in
        ``arguments_style`` (so every family bounds whitespace alike). None (the default): the
        constraint builder assembles the pieces. May raise ValueError (its message says why) for tools
        the format cannot express; the constraint builder makes that a 400 naming ``tools``."""
        return None

    def answer(self, content: JsonObject) -> JsonObject | None:
        """The family's frame around a constrained answer (``response_format``, structured outputs)
        for formats whose text sits in messages (Harmony's final channel). None (the default): the
        answer is the output as it stands."""
        return None


class ToolParser(ABC):
    """One tool-call format. Markers and the format are class data.

    Class attributes:
      ``name``   registry name.
      ``start``  marker that opens the tool-call section (e.g. ``"<tool_call>"``); text
                 before it is content. Empty when calls have no marker.
      ``end``    marker that closes one call (``""`` when none).
      ``format`` the exact format as pieces, see :class:`CallFormat`.
    """

    name: ClassVar[str]
    start: ClassVar[str]
    end: ClassVar[str]
    format: ClassVar[CallFormat]
    # True: an open call's ``arguments`` are the model's own JSON text from the value's start,
    # so a stream may append generated text to them without a parse (MessageStream's fast
    # path). False for formats whose arguments are converted (XML parameters, keywords).
    raw_arguments: ClassVar[bool] = True
    # True for formats whose output is all channels (Harmony): the parser also finds the message's
    # content and reasoning, so the server runs it on every request (tools or not; calls are then
    # dropped) and keeps special tokens in the output when its markers are special.
    channels: ClassVar[bool] = False
    # Chunks that cannot make a held call sendable: while the last call of a parse is open with
    # nothing to send yet (no name, or no arguments begun), a chunk all of this pattern is not parsed
    # (MessageStream); the next parse sees it, as if the two chunks had come as one. A malformed
    # call shows one chunk later then, a well-formed call's first delta never does. None: parse
    # every chunk (formats where a word can open the arguments, e.g. an XML parameter's name).
    held_inert: ClassVar[re.Pattern[str] | None] = None

    def __init__(self, **data: object) -> None:
        """A variant as data: ``name``, ``start``, ``end`` or ``format`` given here override the
        class's (e.g. one Mistral parser, three formats)."""
        for key, value in data.items():
            if key not in ("name", "start", "end", "format"):
                raise TypeError(f"unknown parser attribute {key!r}")
            setattr(self, key, value)

    def prose_inert(self) -> re.Pattern[str] | None:
        """Chunks that only extend content: after a parse that ends in prose (``ParsedTools.prose_end``)
        with text in it, a chunk all of this pattern is what that parse's content would grow by, so a
        stream sends it without a parse (MessageStream). None (here): parse every chunk."""
        return None

    def with_tools(self, tools: Mapping[str, JsonValue]) -> ToolParser:
        """This parser for a request whose tools are ``tools`` (name -> parameters schema).
        Formats that write arguments as text (XML parameters) type them by the schema, so they
        return a bound copy; JSON formats need no schema and return ``self``."""
        return self

    def write(self, calls: Sequence[Call]) -> str:
        """The text this family's model writes for ``calls``, as its chat template and its grammar
        write it: :meth:`parse` reads the same calls back (``tests/unit/test_write_parse.py`` checks
        that for every family under every chunking). Tests, replays and docs write calls with it, so
        no test copies a family's format."""
        f = self.format
        return f.section_begin + f.separator.join(
            self.write_call(i, name, arguments) for i, (name, arguments) in enumerate(calls)) + f.section_end

    def write_call(self, index: int, name: str, arguments: Mapping[str, JsonValue]) -> str:
        """Call number ``index`` (from 0) of a section: the format's pieces around its arguments."""
        f = self.format
        return f.head(name) + self.write_arguments(arguments) + f.call_end

    def write_arguments(self, arguments: Mapping[str, JsonValue]) -> str:
        """One call's arguments as the format writes them (JSON here; XML and other styles override)."""
        return json.dumps(arguments, ensure_ascii=False)

    @abstractmethod
    def parse(self, text: str, *, final: bool, resume: str | None = None) -> ParsedTools:
        """Parse the whole text so far (or, with ``resume`` from a :class:`Checkpoint`, the
        text after it). While not final, hold back text that may be the start of a marker
        (never emit a partial marker as content)."""


@dataclass(frozen=True)
class ModelFamily:
    """Everything the server knows about how one model family writes tool calls, as data.

    A family module (``tool_parsers/<family>.py``) declares ``FAMILIES``; detection, rendering
    and constraint building read these fields and nothing else knows a family by name.
    """

    name: str  # registry name: --tool-call-parser, and the built-in chat template's name
    parser: ToolParser  # pure parse(text, final=); its ``format`` is what grammars make the model write
    detect: Callable[[str], bool]  # True when a chat template's source is this family's
    detect_order: int = 100  # detection tries lower first (more specific markers before general ones)
    template: str | None = None  # chat_templates/<template>.jinja renders this family's tools, if shipped
    call_id: Callable[[str], str] | None = None  # how its templates need call ids (None: as given)
    reasoning: str | None = None  # the reasoning parser of its thinking templates (--reasoning-parser auto)
    # Its row in docs/tool_calling.md (generated from these by ``python -m tool_parsers._docs``): the
    # models that write it, what they write, the markers ``--tool-call-parser auto`` knows its
    # template by (empty: never detected), and ``doc_row``, the family whose row also lists this
    # name (a dialect or vLLM's other spelling)
    models: str = ""
    writes: str = ""
    detects: str = ""
    doc_row: str | None = None

    @property
    def format(self) -> CallFormat:
        return self.parser.format
