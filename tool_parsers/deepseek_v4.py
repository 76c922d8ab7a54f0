"""DeepSeek V3.2 / V4 / V4.1 "DSML" tool calls (vLLM's ``deepseek_v32``, ``deepseek_v4``, ``deepseek_v41``).

Format (DeepSeek V4's ``encoding_dsv4.py``; one line per element)::

    <｜DSML｜tool_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls>

V3.2 names the section ``function_calls``; V4.1 writes ``<｜DSML｜ calls>``, ``<｜DSML｜ invoke``
and ``<｜DSML｜ parameter`` (a space after the marker). Each dialect reads only its own section
marker (as vLLM's parsers do); the rest is one parser with the markers as data.

A value is text: ``string="true"`` means the raw text is the value, otherwise (``"false"``, or
no attribute) it is JSON. The tool's schema has the last word, as vLLM's type fixer does: raw
text for a parameter that allows no string is read by its type (``42`` for an integer), and a
JSON value that does not fit the schema is read from its text again (``null`` for a string
parameter is ``"null"``). Arguments come back as OpenAI JSON that only grows while streaming
(:func:`tool_parsers._xml_args.arguments_json`): a string value streams as it is written, other
values when their ``</｜DSML｜parameter>`` arrives. Text after the section is content; a call
that breaks is content up to the section's end marker.

The grammar is XGrammar's ``deepseek_xml`` / ``deepseek_v4_1_xml`` argument style (the styles
of its built-in ``deepseek_v3_2`` / ``deepseek_v4`` / ``deepseek_v4_1`` structural tags, whose
layout :class:`DsmlCallFormat` follows). Thinking is ``<think>``…``</think>``, the prompt opening
the block: ``deepseek_r1`` (V4 thinks unless told not to) or ``deepseek_v3`` (V3.2 thinks only
when told).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from ._blocks import SectionToolParser
from ._scan import JsonError, marked_name_end, partial_marker_start, skip_ws
from ._xml_args import SchemaBound, _fits, _types, arguments_json, property_schema, typed_value, xml_text
from .base import CallFormat, JsonObject, JsonValue, ModelFamily, ToolCallPart

__all__ = ["DSML", "Dialect", "DIALECTS", "DsmlCallFormat", "DsmlToolParser", "DeepSeekV32ToolParser",
           "DeepSeekV41ToolParser", "dsml_value", "dsml_call", "FAMILIES"]

DSML = "｜DSML｜"
_NAME_END = '">'
_BAD_NAME = re.compile(r'[<>\n"｜]')
_LAYOUT = "\n\n"  # what the template writes between the content and the section


@dataclass(frozen=True)
class Dialect:
    """One version's markers: the section's name and the tag names of calls and parameters."""

    section: str  # "tool_calls" (V4), "function_calls" (V3.2), " calls" (V4.1)
    invoke: str = "invoke"
    parameter: str = "parameter"
    style: str = "deepseek_xml"  # XGrammar's argument style for this dialect

    @property
    def start(self) -> str:
        return f"<{DSML}{self.section}>"

    @property
    def end(self) -> str:
        return f"</{DSML}{self.section}>"

    @property
    def call_open(self) -> str:
        return f'<{DSML}{self.invoke} name="'

    @property
    def call_close(self) -> str:
        return f"</{DSML}{self.invoke}>"

    @property
    def param_open(self) -> str:
        return f"<{DSML}{self.parameter}"

    @property
    def param_close(self) -> str:
        return f"</{DSML}{self.parameter}>"

    @property
    def head(self) -> re.Pattern[str]:
        """A parameter's opening tag; the ``string`` attribute may be missing (vLLM reads that too)."""
        return re.compile(re.escape(self.param_open) + r'\s+name="([^"<>\n]+)"(?:\s+string="([^"]*)")?\s*>')


DIALECTS: Mapping[str, Dialect] = {
    "deepseek_v32": Dialect("function_calls"),
    "deepseek_v4": Dialect("tool_calls"),
    "deepseek_v41": Dialect(" calls", " invoke", " parameter", "deepseek_v4_1_xml"),
}


def dsml_value(text: str, is_string: bool, schema: JsonValue) -> JsonValue:
    """The value of one parameter: raw text (``string="true"``) or JSON, typed by ``schema``."""
    types = _types(schema)
    if is_string and (schema is None or not types or "string" in types):
        return text
    if not is_string:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            pass
        else:
            if _fits(value, types):  # (no types: any JSON data; NaN, which json.loads reads, is none)
                return value
    return typed_value(text, schema)


def _streams(is_string: bool, schema: JsonValue) -> bool:
    """Whether a value's text is its value whatever follows (so it may stream before it closes)."""
    types = _types(schema)
    return is_string and (schema is None or not types or "string" in types)


def dsml_call(text: str, p: int, name: str, schema: JsonValue, dialect: Dialect, *,
              final: bool) -> tuple[ToolCallPart, int | None]:
    """The call ``name`` whose parameters start at ``p`` and where its ``</｜DSML｜invoke>`` ends
    (None: cut off while streaming); :class:`JsonError` when malformed."""
    done: list[tuple[str, JsonValue]] = []
    head, opening, closing, call_close = dialect.head, dialect.param_open, dialect.param_close, dialect.call_close
    r = p
    while True:
        r = skip_ws(text, r)
        if text.startswith(opening, r):
            m = head.match(text, r)
            if m is None:
                if not final and text.find(">", r) < 0:
                    return ToolCallPart(name, arguments_json(done, complete=False), False), None
                raise JsonError("expected a parameter tag", r)
            key, is_string = m.group(1), m.group(2) == "true"
            prop = property_schema(schema, key)
            v = m.end()
            v_end = text.find(closing, v)
            if v_end < 0:
                if final:
                    raise JsonError(f"the text ends inside parameter {key!r}", len(text))
                open_text = None
                if _streams(is_string, prop):
                    open_text = (key, text[v : partial_marker_start(text, (closing,), v)])
                return ToolCallPart(name, arguments_json(done, open_text, complete=False), False), None
            done.append((key, dsml_value(text[v:v_end], is_string, prop)))
            r = v_end + len(closing)
        elif text.startswith(call_close, r):
            return ToolCallPart(name, arguments_json(done, complete=True), True), r + len(call_close)
        elif not final and (opening.startswith(text[r:]) or call_close.startswith(text[r:])):
            return ToolCallPart(name, arguments_json(done, complete=False) if done else "", False), None
        else:
            raise JsonError(f"expected {opening} or {call_close}", r)


@dataclass(frozen=True)
class DsmlCallFormat(CallFormat):
    """The pieces (as the template writes them) and the grammar: XGrammar's built-in DSML layout,
    the section optionally after the template's blank line when a call is required."""

    def structural_tag(self, tools: Sequence[tuple[str, JsonValue]], *, mode: Literal["auto", "required"],
                       parallel: bool, arguments: Callable[[JsonValue], JsonObject]) -> JsonObject | None:
        calls: list[JsonValue] = [{"type": "tag", "begin": self.call_begin + name + self.name_end,
                                   "content": arguments(schema), "end": self.call_end} for name, schema in tools]
        inner: JsonObject = {"type": "tags_with_separator", "tags": calls, "separator": self.separator,
                             "at_least_one": True, "stop_after_first": not parallel}
        section: JsonObject = {"type": "tag", "begin": self.section_begin, "content": inner, "end": self.section_end}
        if mode == "required":
            return {"type": "sequence", "elements": [
                {"type": "optional", "content": {"type": "const_string", "value": _LAYOUT}}, section]}
        return {"type": "triggered_tags", "triggers": [self.trigger], "tags": [section], "stop_after_first": True}


def _format(d: Dialect) -> DsmlCallFormat:
    return DsmlCallFormat(trigger=d.start, section_begin=d.start + "\n", call_begin=d.call_open, name_end=_NAME_END + "\n",
                          call_end=d.call_close + "\n", separator="", section_end=d.end, arguments_style=d.style)


class DsmlToolParser(SchemaBound, SectionToolParser):
    """One DSML section of ``invoke`` calls; the dialect (V4 by default) is class data, the
    other versions subclass it."""

    name: ClassVar[str] = "deepseek_v4"
    dialect: ClassVar[Dialect] = DIALECTS["deepseek_v4"]
    start: ClassVar[str] = dialect.start
    end: ClassVar[str] = dialect.end
    call_open: ClassVar[str] = dialect.call_open
    format: ClassVar[CallFormat] = _format(dialect)

    def write_arguments(self, arguments: Mapping[str, JsonValue]) -> str:
        """A parameter element per argument: a string raw (``string="true"``), anything else as JSON."""
        d = self.dialect
        return "".join(f'{d.param_open} name="{k}" string="{str(isinstance(v, str)).lower()}">'
                       f"{xml_text(v)}{d.param_close}\n" for k, v in arguments.items())

    def _call(self, text: str, p: int, *, final: bool) -> tuple[ToolCallPart, int | None]:
        """``name">`` then the parameters up to ``</｜DSML｜invoke>``."""
        q = marked_name_end(text, p, _NAME_END, _BAD_NAME, final=final)
        if q is None:
            return ToolCallPart(None, "", False), None
        name = text[p:q]
        return dsml_call(text, q + len(_NAME_END), name, self._schemas.get(name), self.dialect, final=final)


class DeepSeekV32ToolParser(DsmlToolParser):
    """V3.2: a ``<｜DSML｜function_calls>`` section."""

    name: ClassVar[str] = "deepseek_v32"
    dialect: ClassVar[Dialect] = DIALECTS["deepseek_v32"]
    start: ClassVar[str] = dialect.start
    end: ClassVar[str] = dialect.end
    call_open: ClassVar[str] = dialect.call_open
    format: ClassVar[CallFormat] = _format(dialect)


class DeepSeekV41ToolParser(DsmlToolParser):
    """V4.1: ``<｜DSML｜ calls>``, ``<｜DSML｜ invoke`` and ``<｜DSML｜ parameter``."""

    name: ClassVar[str] = "deepseek_v41"
    dialect: ClassVar[Dialect] = DIALECTS["deepseek_v41"]
    start: ClassVar[str] = dialect.start
    end: ClassVar[str] = dialect.end
    call_open: ClassVar[str] = dialect.call_open
    format: ClassVar[CallFormat] = _format(dialect)


def _detect(family: str) -> Callable[[str], bool]:
    """A template writing DSML (the marker's text) and this dialect's section name after it, after a
    ``dsml_token`` variable (``<{{ dsml_token }}tool_calls>``) or in a string joined to it."""
    section = DIALECTS[family].section

    def detect(template: str) -> bool:
        if DSML not in template:
            return False
        return any(f"{lead}{section}>" in template for lead in (DSML, "}}", '"'))

    return detect


_DEEPSEEK_V4_WRITES = ("DSML: `<｜DSML｜tool_calls>\\n<｜DSML｜invoke name=\"f\">\\n<｜DSML｜parameter name=\"k\" "
                       "string=\"true\">v</｜DSML｜parameter>\\n</｜DSML｜invoke>\\n</｜DSML｜tool_calls>` (V3.2: "
                       "`function_calls`; V4.1: `<｜DSML｜ calls>`, `<｜DSML｜ invoke`, `<｜DSML｜ parameter`); each dialect "
                       "reads only its own section. `string=\"true\"` is raw text, otherwise JSON; the tool's schema has "
                       "the last word (raw `42` for an integer is 42, JSON `null` for a string is `\"null\"`) and the "
                       "arguments come back as JSON (a string streams as written, other values when they close); "
                       "grammar: XGrammar's `deepseek_xml` / `deepseek_v4_1_xml` styles; thinking `deepseek_r1` (V4 "
                       "thinks unless `thinking: false`), `deepseek_v3` for V3.2. DeepSeek publishes V4's prompt format "
                       "as Python (`encoding_dsv4.py`), not Jinja: `tests/data/templates/deepseek_v4.jinja` renders it "
                       "(checked against the encoder), pass it with `--chat-template`")

FAMILIES = (
    ModelFamily(name="deepseek_v4", reasoning="deepseek_r1", parser=DsmlToolParser(), detect=_detect("deepseek_v4"),
                detect_order=2,
                models="DeepSeek V4 (Pro, Flash) / V4.1 / V3.2",
                writes=_DEEPSEEK_V4_WRITES,
                detects="`｜DSML｜` with `tool_calls>`"),
    ModelFamily(name="deepseek_v41", reasoning="deepseek_r1", parser=DeepSeekV41ToolParser(), detect=_detect("deepseek_v41"),
                detect_order=2,
                doc_row="deepseek_v4",
                detects="`｜DSML｜` with ` calls>`"),
    ModelFamily(name="deepseek_v32", reasoning="deepseek_v3", parser=DeepSeekV32ToolParser(), detect=_detect("deepseek_v32"),
                detect_order=2,
                doc_row="deepseek_v4",
                detects="`｜DSML｜` with `function_calls>`"),
)
