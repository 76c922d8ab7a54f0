"""Kimi K3 "XTML" channels and tool calls (vLLM's ``kimi_k3``).

The answer is channels built from three special tokens, ``<|open|>``, ``<|sep|>``, ``<|close|>``
(Kimi-K3's chat template; one line, wrapped here)::

    <|open|>response<|sep|>Let me check.<|close|>response<|sep|>
    <|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>
    <|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>
    <|open|>argument key="days" type="number"<|sep|>3<|close|>argument<|sep|>
    <|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>

The prompt ends inside the first channel (``<|open|>think<|sep|>``, or ``<|open|>response<|sep|>``
with thinking off), so the answer may start inside the response body. The think channel is the
``kimi_k3`` reasoning parser's; the response body is content, its markers and the closing
``<|close|>message<|sep|>`` are not. Channels are the message itself, so the family parses every
answer (:attr:`KimiK3ToolParser.channels`), tools or not.

An argument's ``type="string"`` value is its raw text; any other is JSON; the tool's schema has the
last word (:mod:`tool_parsers._xml_args`), and a ``<|open|>json type="object"<|sep|>{...}`` block
is read as the whole arguments object. Attribute values are unescaped (``&quot;``, ``&amp;``).
Arguments come back as OpenAI JSON that only grows while streaming (a string value as written).
A call that breaks is content up to its ``<|close|>call<|sep|>``. The grammar follows XGrammar's
``kimi_k3`` built-in tag (``kimi_k3_xml`` argument style); under ``required`` the response body
is empty.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from ._content import AFTER_CALL, ContentBuilder, malformed_block, without
from ._scan import JsonError, partial_marker_start, skip_ws
from ._xml_args import SchemaBound, _fits, _types, arguments_json, property_schema, typed_value, xml_text
from .base import CallFormat, Checkpoint, JsonObject, JsonValue, ModelFamily, ParsedTools, ToolCallPart

__all__ = ["KimiK3CallFormat", "KimiK3ToolParser", "MARKERS", "FAMILIES"]

OPEN, SEP, CLOSE = "<|open|>", "<|sep|>", "<|close|>"
RESPONSE_OPEN, RESPONSE_CLOSE = f"{OPEN}response{SEP}", f"{CLOSE}response{SEP}"
TOOLS_OPEN, TOOLS_CLOSE = f"{OPEN}tools{SEP}", f"{CLOSE}tools{SEP}"
MESSAGE_CLOSE = f"{CLOSE}message{SEP}"
CALL_OPEN, CALL_CLOSE = f"{OPEN}call", f"{CLOSE}call{SEP}"
ARG_OPEN, ARG_CLOSE = f"{OPEN}argument", f"{CLOSE}argument{SEP}"
JSON_OPEN, JSON_CLOSE = f"{OPEN}json", f"{CLOSE}json{SEP}"
MARKERS = (RESPONSE_OPEN, RESPONSE_CLOSE, TOOLS_OPEN, TOOLS_CLOSE, MESSAGE_CLOSE)  # never content
# dropped where they stand (a tools-channel close outside the channel too: a marker is never content,
# and a marker the loop below neither drops nor opens would stop it at the same place for ever)
_WRAPPERS = (RESPONSE_OPEN, RESPONSE_CLOSE, MESSAGE_CLOSE, TOOLS_CLOSE)
_ATTR = re.compile(r'(\w+)="([^"]*)"')
_IN_TOOLS = "in_tools"  # resume word: between calls of the tools channel


def _attrs(raw: str) -> dict[str, str]:
    """A tag's attributes, unescaped as the template escaped them."""
    return {k: v.replace("&quot;", '"').replace("&amp;", "&") for k, v in _ATTR.findall(raw)}


def _escape(value: str) -> str:
    return value.replace("&", "&amp;").replace('"', "&quot;")


def _value(text: str, kind: str, schema: JsonValue) -> JsonValue:
    """One argument: raw text for ``type="string"``, else JSON; read again by the schema when that
    reading does not fit it."""
    types = _types(schema)
    if kind == "string" and (schema is None or not types or "string" in types):
        return text
    if kind != "string":
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            pass
        else:
            if _fits(value, types):  # (no types: any JSON data; NaN, which json.loads reads, is none)
                return value
    return typed_value(text, schema)


def _kind(value: JsonValue) -> str:
    """The ``type`` attribute of a value."""
    if isinstance(value, str):
        return "string"
    if value is True or value is False:
        return "boolean"
    if value is None:
        return "null"
    return "object" if isinstance(value, Mapping) else "array" if isinstance(value, list) else "number"


def _streams(kind: str, schema: JsonValue) -> bool:
    types = _types(schema)
    return kind == "string" and (schema is None or not types or "string" in types)


@dataclass(frozen=True)
class KimiK3CallFormat(CallFormat):
    """The pieces (one call, index 1) and the grammar of the whole answer after any thinking."""

    def structural_tag(self, tools: Sequence[tuple[str, JsonValue]], *, mode: Literal["auto", "required"],
                       parallel: bool, arguments: Callable[[JsonValue], JsonObject]) -> JsonObject | None:
        calls: list[JsonValue] = [{"type": "tag", "begin": f'{CALL_OPEN} tool="{_escape(name)}" index="', "end": CALL_CLOSE,
                  "content": {"type": "sequence", "elements": [
                      {"type": "regex", "pattern": r"\d{1,4}"}, {"type": "const_string", "value": '"' + SEP},
                      arguments(schema)]}} for name, schema in tools]
        section: JsonObject = {"type": "sequence", "elements": [
            {"type": "const_string", "value": TOOLS_OPEN},
            {"type": "tags_with_separator", "tags": calls, "separator": "", "at_least_one": True,
             "stop_after_first": not parallel},
            {"type": "const_string", "value": TOOLS_CLOSE}]}
        if mode == "required":  # calls only: an empty response channel
            return {"type": "sequence", "elements": [_response_open(), {"type": "const_string", "value": RESPONSE_CLOSE},
                                                     section, {"type": "const_string", "value": MESSAGE_CLOSE}]}
        body: JsonObject = {"type": "tag", "begin": "", "content": {"type": "any_text", "excludes": [OPEN, CLOSE]},
                            "end": RESPONSE_CLOSE}
        return {"type": "sequence", "elements": [_response_open(), body, {"type": "optional", "content": section},
                                                 {"type": "const_string", "value": MESSAGE_CLOSE}]}

    def answer(self, content: JsonObject) -> JsonObject | None:
        """A constrained answer (``response_format``) is the response channel's body."""
        return {"type": "sequence", "elements": [_response_open(), content, {"type": "const_string", "value": RESPONSE_CLOSE},
                                                 {"type": "const_string", "value": MESSAGE_CLOSE}]}


def _response_open() -> JsonObject:
    """The response channel's opening marker: written by the model after thinking, by the prompt without."""
    return {"type": "optional", "content": {"type": "const_string", "value": RESPONSE_OPEN}}


class KimiK3ToolParser(SchemaBound):
    """The response channel as content, the tools channel's calls as calls."""

    name: ClassVar[str] = "kimi_k3"
    start: ClassVar[str] = TOOLS_OPEN
    end: ClassVar[str] = TOOLS_CLOSE
    channels: ClassVar[bool] = True
    format: ClassVar[CallFormat] = KimiK3CallFormat(
        trigger=TOOLS_OPEN, section_begin=TOOLS_OPEN, call_begin=f'{CALL_OPEN} tool="', name_end=f'" index="1"{SEP}',
        call_end=CALL_CLOSE, separator="", section_end=TOOLS_CLOSE, arguments_style="kimi_k3_xml")

    def write_call(self, index: int, name: str, arguments: Mapping[str, JsonValue]) -> str:
        """``index="N"`` counts the calls from 1; the name is escaped as an attribute value."""
        return (f'{CALL_OPEN} tool="{_escape(name)}" index="{index + 1}"{SEP}' + self.write_arguments(arguments)
                + CALL_CLOSE)

    def write_arguments(self, arguments: Mapping[str, JsonValue]) -> str:
        """An ``argument`` element per argument, typed as XGrammar's ``kimi_k3_xml`` style types it
        (every number ``number``)."""
        return "".join(f'{ARG_OPEN} key="{_escape(k)}" type="{_kind(v)}"{SEP}{xml_text(v)}{ARG_CLOSE}'
                       for k, v in arguments.items())

    def parse(self, text: str, *, final: bool, resume: str | None = None) -> ParsedTools:
        """Channels in order; checkpoints after each call, after the tools channel and in content."""
        out = ContentBuilder(resume=AFTER_CALL if resume == _IN_TOOLS else resume)
        calls: list[ToolCallPart] = []
        errors: list[str] = []
        bad: list[tuple[int, int | None]] = []
        marks: list[Checkpoint | None] = [None]  # the furthest checkpoint so far (last)
        p: int | None = 0
        if resume == _IN_TOOLS:
            p = self._section(text, 0, final=final, out=out, calls=calls, errors=errors, bad=bad, marks=marks)
        n = len(text)
        prose_end = False
        while p is not None and p < n:
            q = skip_ws(text, p)
            wrapper = next((m for m in _WRAPPERS if text.startswith(m, q)), None)
            if wrapper is not None:
                out.add(text[p:q])
                p = q + len(wrapper)
            elif text.startswith(TOOLS_OPEN, q):
                p = self._section(text, q + len(TOOLS_OPEN), final=final, out=out, calls=calls, errors=errors, bad=bad,
                                  marks=marks)
            else:
                stops = [i for i in (text.find(m, q) for m in MARKERS) if i >= 0]
                if stops:
                    out.add(text[p:min(stops)])
                    p = min(stops)
                    continue
                stop = n if final else partial_marker_start(text, MARKERS, p)
                out.add(text[p:stop])
                out.tail_end = stop
                marks.append(out.tail_checkpoint(text, p, len(calls), len(errors)) or marks[-1])
                prose_end = stop == n  # (nothing held back: text without a marker's "<" stays content)
                break
        return ParsedTools(out.result(final=final), tuple(calls), tuple(errors), marks[-1], tuple(bad),
                           prose_end=prose_end)

    def prose_inert(self) -> re.Pattern[str] | None:
        """In content every channel marker (and every call's) begins with ``<``."""
        return without(OPEN[0])

    def _section(self, text: str, p: int, *, final: bool, out: ContentBuilder, calls: list[ToolCallPart],
                 errors: list[str], bad: list[tuple[int, int | None]], marks: list[Checkpoint | None]) -> int | None:
        """The calls of the tools channel from ``p``; where content resumes (None: the text ends in it)."""
        while True:
            r = skip_ws(text, p)
            if text.startswith(CALL_OPEN, r):
                out.call()
                try:
                    call, end = self._call(text, r + len(CALL_OPEN), final=final)
                except JsonError as exc:
                    resume = malformed_block(text, r, r, exc, end=CALL_CLOSE, final=final, who=self.name, out=out,
                                             errors=errors, bad=bad)
                    if resume is None:
                        return None
                    p = resume
                    continue
                calls.append(call)
                if end is None:
                    return None
                p = end
                if not bad:  # (a malformed call's region is the stream's to resume after)
                    marks.append(Checkpoint(p, out.length, len(calls), len(errors), _IN_TOOLS))
            elif text.startswith(TOOLS_CLOSE, r):
                end = r + len(TOOLS_CLOSE)
                if not bad:
                    marks.append(out.checkpoint(end, len(calls), len(errors)) or marks[-1])
                return end
            elif r >= len(text) or (not final and any(m.startswith(text[r:]) for m in (CALL_OPEN, TOOLS_CLOSE))):
                return None  # the channel is still open (or the text ends after its calls)
            else:
                return r  # not a call: content again

    def _call(self, text: str, p: int, *, final: bool) -> tuple[ToolCallPart, int | None]:
        """``tool="f" index="N"<|sep|>`` then arguments up to ``<|close|>call<|sep|>``."""
        head = self._head(text, p, final=final)
        if head is None:
            return ToolCallPart(None, "", False), None
        attrs, q = head
        name = attrs.get("tool")
        if not name:
            raise JsonError("a call without a tool name", p)
        schema = self._schemas.get(name)
        done: list[tuple[str, JsonValue]] = []
        r = q
        while True:
            r = skip_ws(text, r)
            if text.startswith(ARG_OPEN, r):
                head = self._head(text, r + len(ARG_OPEN), final=final)
                if head is None:
                    return ToolCallPart(name, arguments_json(done, complete=False), False), None
                attrs, v = head
                key, kind = attrs.get("key"), attrs.get("type", "string")
                if not key:
                    raise JsonError("an argument without a key", r)
                prop = property_schema(schema, key)
                v_end = text.find(ARG_CLOSE, v)
                if v_end < 0:
                    if final:
                        raise JsonError(f"the text ends inside argument {key!r}", len(text))
                    open_text = (key, text[v:partial_marker_start(text, (ARG_CLOSE,), v)]) if _streams(kind, prop) else None
                    return ToolCallPart(name, arguments_json(done, open_text, complete=False), False), None
                done.append((key, _value(text[v:v_end], kind, prop)))
                r = v_end + len(ARG_CLOSE)
            elif text.startswith(JSON_OPEN, r):
                head = self._head(text, r + len(JSON_OPEN), final=final)
                j_end = -1 if head is None else text.find(JSON_CLOSE, head[1])
                if head is None or j_end < 0:
                    if final:
                        raise JsonError("the text ends inside a json block", len(text))
                    return ToolCallPart(name, arguments_json(done, complete=False), False), None
                try:
                    obj = json.loads(text[head[1]:j_end])
                except (ValueError, RecursionError):
                    raise JsonError("a json block that is not JSON", head[1]) from None
                if not isinstance(obj, dict):
                    raise JsonError("a json block that is not an object", head[1])
                done.extend(obj.items())
                r = j_end + len(JSON_CLOSE)
            elif text.startswith(CALL_CLOSE, r):
                return ToolCallPart(name, arguments_json(done, complete=True), True), r + len(CALL_CLOSE)
            elif not final and any(m.startswith(text[r:]) for m in (ARG_OPEN, JSON_OPEN, CALL_CLOSE)):
                return ToolCallPart(name, arguments_json(done, complete=False) if done else "", False), None
            else:
                raise JsonError(f"expected {ARG_OPEN!r} or {CALL_CLOSE!r}", r)

    @staticmethod
    def _head(text: str, p: int, *, final: bool) -> tuple[dict[str, str], int] | None:
        """The attributes from ``p`` to ``<|sep|>`` and where the body starts (None: cut off)."""
        q = text.find(SEP, p)
        stray = min((i for i in (text.find(OPEN, p), text.find(CLOSE, p)) if i >= 0), default=-1)
        if 0 <= stray < (q if q >= 0 else len(text)):
            raise JsonError("a tag's attributes are not closed", stray)
        if q < 0:
            if final:
                raise JsonError("the text ends inside a tag", len(text))
            return None
        return _attrs(text[p:q]), q + len(SEP)


def _detect(template: str) -> bool:
    """Kimi-K3's template writes the three XTML tokens (its tags are built by macros)."""
    return all(m in template for m in (OPEN, SEP, CLOSE))


_KIMI_K3_WRITES = ("XTML channels of three special tokens: "
                   "`<|open|>response<|sep|>text<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" "
                   "index=\"1\"<|sep|><|open|>argument key=\"k\" type=\"string\"<|sep|>v<|close|>argument<|sep|><|close|>c"
                   "all<|sep|><|close|>tools<|sep|><|close|>message<|sep|>` (the prompt opens the think or the "
                   "response channel); the response body is `content`, the markers never are; `type=\"string\"` values"
                   " are raw text, others JSON, both typed by the tool's schema (a `<|open|>json "
                   "type=\"object\"<|sep|>{...}` block is read as the whole arguments); channels, so the family reads "
                   "every answer (tools or not) as gpt_oss does; the grammar (XGrammar's `kimi_k3` layout) writes "
                   "`type=\"number\"` for numbers as the template, leaves the response body empty under `required`, "
                   "and puts a `response_format` answer in the response channel")

FAMILIES = (
    ModelFamily(name="kimi_k3", reasoning="kimi_k3", parser=KimiK3ToolParser(), detect=_detect, detect_order=3,
                models="Kimi K3",
                writes=_KIMI_K3_WRITES,
                detects="`<|open|>`, `<|sep|>` and `<|close|>`"),
)
