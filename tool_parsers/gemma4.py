"""Gemma 4 tool calls (vLLM's ``gemma4``).

Format (Gemma 4's chat template; vLLM's ``vllm/parser/gemma4.py``)::

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,opts:{units:<|"|>metric<|"|>}}<tool_call|>

Calls follow each other with nothing between them, after optional text. Arguments are Gemma's own
notation, not JSON: keys bare (``<|"|>``-quoted keys are read too), strings between ``<|"|>``
delimiters with no escapes, numbers and ``true`` / ``false`` / ``null`` bare (``None``, which
Jinja writes for a null in history, is read as null), objects ``{k:v,...}``, arrays ``[v,...]``.
Values are typed by the tool's schema (:mod:`tool_parsers._xml_args`): a bare ``42`` for a
string parameter is ``"42"``, a quoted ``<|"|>5<|"|>`` for an integer one is 5; for an unknown
parameter a bare value is read as JSON. The arguments come back as OpenAI JSON that only grows
while streaming: a top-level string value streams as it is written, other values when they close.
A call that breaks is content up to its ``<tool_call|>``, as in every block family.

XGrammar's built-in ``gemma_4`` tag is disabled upstream (its JSON arguments are not Gemma's
notation), so the family owns its grammar (:meth:`Gemma4CallFormat.structural_tag`): one EBNF per
tool (:func:`arguments_grammar`), keys in the template's order (sorted, as its ``dictsort``),
no whitespace, strings up to the first ``<|"|>``. Tools whose schemas it cannot enforce exactly
(string ``pattern`` / ``format`` / lengths, ``uniqueItems``, ...) are refused with a message
(a 400 naming ``tools``), never loosened. Gemma 4 thinks in ``<|channel>thought\\n`` ..
``<channel|>`` (``reasoning_parsers.gemma4``).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeVar

from ._blocks import BlockToolParser
from ._scan import JsonError, marked_name_end, partial_marker_start, skip_ws
from ._xml_args import SchemaBound, _fits, _types, arguments_json, property_schema, streams_as_text, typed_value
from .base import CallFormat, JsonObject, JsonValue, ModelFamily, ToolCallPart

__all__ = ["Gemma4ToolParser", "Gemma4CallFormat", "UnsupportedSchema", "arguments_grammar", "gemma_value", "gemma_literal",
           "QUOTE", "TOOL_CALL", "TOOL_CALL_END", "FAMILIES"]

QUOTE = '<|"|>'
TOOL_CALL, TOOL_CALL_END = "<|tool_call>", "<tool_call|>"
_CALL = "call:"
_BAD_NAME = re.compile(r"[<>\n:,}]")
_KEY = re.compile(r'[^:,{}\[\]<>\s"]+')
_BARE = re.compile(r"[^,}\]<]*")
_MAX_DEPTH = 64
_T = TypeVar("_T")  # what one member of a container is (an item, or an object's (key, value))


# --- reading -----------------------------------------------------------------------------------

def _allows_string(schema: JsonValue) -> bool:
    types = _types(schema)
    return schema is None or not types or "string" in types


def _bare(raw: str, schema: JsonValue) -> JsonValue:
    """A bare value's meaning for ``schema`` (unknown parameters: read as JSON, else text)."""
    if schema is not None and streams_as_text(schema):
        return raw
    norm = "null" if raw == "None" else raw
    if schema is None:
        try:
            value = json.loads(norm)
        except (ValueError, RecursionError):
            return raw
        return value if _fits(value, set()) else raw  # (NaN and Infinity, which json.loads reads, are no JSON)
    return typed_value(norm, schema)


def _key(text: str, p: int, *, final: bool) -> tuple[str, int] | None:
    """The key at ``p`` and where its value starts (after ``:``); None: cut off while streaming."""
    if text.startswith(QUOTE, p):
        close = text.find(QUOTE, p + len(QUOTE))
        if close < 0:
            if final:
                raise JsonError("the text ends inside a key", len(text))
            return None
        key, q = text[p + len(QUOTE) : close], close + len(QUOTE)
    else:
        if not final and QUOTE.startswith(text[p:]):
            return None
        m = _KEY.match(text, p)
        if m is None:
            raise JsonError("expected a key", p)
        key, q = m.group(), m.end()
    q = skip_ws(text, q)
    if q >= len(text):
        if final:
            raise JsonError("the text ends after a key", q)
        return None
    if text[q] != ":":
        raise JsonError("expected ':' after a key", q)
    return key, q + 1


def _members(text: str, p: int, close: str, *, final: bool, depth: int,
             member: Callable[[str, int], tuple[_T, int] | None]) -> tuple[list[_T], int] | None:
    """The ``,``-separated members from ``p`` up to ``close`` (``member`` reads one) and where the
    container ends; None: cut off while streaming."""
    if depth > _MAX_DEPTH:
        raise JsonError("values nest too deep", p)
    out: list[_T] = []
    r = p
    while True:
        r = skip_ws(text, r)
        if r >= len(text):
            if final:
                raise JsonError(f"the text ends before {close!r}", r)
            return None
        if text[r] == close:
            return out, r + 1
        if out:
            if text[r] != ",":
                raise JsonError(f"expected ',' or {close!r}", r)
            r = skip_ws(text, r + 1)
        found = member(text, r)
        if found is None:
            return None
        value, r = found
        out.append(value)


def gemma_value(text: str, p: int, schema: JsonValue, *, final: bool, depth: int = 0) -> tuple[JsonValue, int] | None:
    """The value written at ``p`` typed by ``schema`` and where it ends; None: cut off while
    streaming; :class:`JsonError` when no continuation can make it a value."""
    p = skip_ws(text, p)
    if p >= len(text):
        if final:
            raise JsonError("expected a value", p)
        return None
    if text.startswith(QUOTE, p):
        close = text.find(QUOTE, p + len(QUOTE))
        if close < 0:
            if final:
                raise JsonError("the text ends inside a string", len(text))
            return None
        raw = text[p + len(QUOTE) : close]
        return (raw if _allows_string(schema) else typed_value(raw, schema)), close + len(QUOTE)
    if not final and QUOTE.startswith(text[p:]):
        return None
    if text[p] == "{":
        extra = schema.get("additionalProperties") if isinstance(schema, Mapping) else None

        def pair(t: str, r: int) -> tuple[tuple[str, JsonValue], int] | None:
            found = _key(t, r, final=final)
            if found is None:
                return None
            key, v = found
            sub = property_schema(schema, key)
            got = gemma_value(t, v, sub if sub is not None else (extra if isinstance(extra, Mapping) else None),
                              final=final, depth=depth + 1)
            return None if got is None else ((key, got[0]), got[1])

        members = _members(text, p + 1, "}", final=final, depth=depth, member=pair)
        return None if members is None else (dict(members[0]), members[1])
    if text[p] == "[":
        items = schema.get("items") if isinstance(schema, Mapping) else None

        def item(t: str, r: int) -> tuple[JsonValue, int] | None:
            return gemma_value(t, r, items if isinstance(items, Mapping) else None, final=final, depth=depth + 1)

        return _members(text, p + 1, "]", final=final, depth=depth, member=item)
    end = _BARE.match(text, p).end()  # type: ignore[union-attr]
    if end >= len(text):
        if final:
            raise JsonError("the text ends inside a value", end)
        return None  # a number or word may still grow
    raw = text[p:end].strip()
    if not raw:
        raise JsonError("expected a value", p)
    return _bare(raw, schema), end


def _arguments(text: str, p: int, name: str, schema: JsonValue, *, final: bool) -> tuple[ToolCallPart, int | None]:
    """The call's arguments object opening at ``p`` (its ``{``) as JSON, and where it ends."""
    done: list[tuple[str, JsonValue]] = []
    r = p + 1

    def cut(open_text: tuple[str, str] | None = None) -> tuple[ToolCallPart, None]:
        args = arguments_json(done, open_text, complete=False) if done or open_text else ""
        return ToolCallPart(name, args, False), None

    while True:
        r = skip_ws(text, r)
        if r >= len(text):
            if final:
                raise JsonError("the text ends inside the arguments", r)
            return cut()
        if text[r] == "}":
            return ToolCallPart(name, arguments_json(done, complete=True), True), r + 1
        if done:
            if text[r] != ",":
                raise JsonError("expected ',' or '}'", r)
            r = skip_ws(text, r + 1)
        found = _key(text, r, final=final)
        if found is None:
            return cut()
        key, v = found
        prop = property_schema(schema, key)
        v = skip_ws(text, v)
        if text.startswith(QUOTE, v) and streams_as_text(prop) and text.find(QUOTE, v + len(QUOTE)) < 0 and not final:
            body = v + len(QUOTE)
            return cut((key, text[body : partial_marker_start(text, (QUOTE,), body)]))
        got = gemma_value(text, v, prop, final=final)
        if got is None:
            return cut()
        done.append((key, got[0]))
        r = got[1]


class Gemma4ToolParser(SchemaBound, BlockToolParser):
    """``<|tool_call>call:f{...}<tool_call|>`` blocks, arguments typed by the request's schemas."""

    name: ClassVar[str] = "gemma4"
    start: ClassVar[str] = TOOL_CALL
    end: ClassVar[str] = TOOL_CALL_END
    format: ClassVar[CallFormat]  # set below (Gemma4CallFormat)

    def write_arguments(self, arguments: Mapping[str, JsonValue]) -> str:
        """Gemma's notation (``{k:<|"|>v<|"|>}``, keys sorted as its template sorts them)."""
        return gemma_literal(dict(arguments))

    def _block(self, text: str, body: int, *, final: bool, errors: list[str]) -> tuple[list[ToolCallPart], int | None]:
        p = skip_ws(text, body)
        if text.startswith(_CALL, p):
            p += len(_CALL)
        elif text.startswith(":", p):
            p += 1  # vLLM: some checkpoints write the opener without "call"
        elif not final and _CALL.startswith(text[p:]):
            return [ToolCallPart(None, "", False)], None
        else:
            raise JsonError(f"expected {_CALL!r}", p)
        q = marked_name_end(text, p, "{", _BAD_NAME, final=final)
        if q is None:
            return [ToolCallPart(None, "", False)], None
        name = text[p:q].strip()
        call, r = _arguments(text, q, name, self._schemas.get(name), final=final)
        if r is None:
            return [call], None
        e = skip_ws(text, r)
        if text.startswith(self.end, e):
            return [call], e + len(self.end)
        if text.startswith(self.start, e) or (final and e >= len(text)):
            return [call], e  # the next call, or the end of the output: the call stands
        if not final and (self.end.startswith(text[e:]) or self.start.startswith(text[e:])):
            return [call], None
        raise JsonError(f"expected {self.end!r} after the arguments", e)


# --- the grammar ---------------------------------------------------------------------------------

class UnsupportedSchema(ValueError):
    """A tool's ``parameters`` that Gemma 4's grammar cannot enforce exactly (the message says why)."""


_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "deprecated", "readOnly",
                          "writeOnly", "$schema", "$id", "nullable", "strict"})
_SUPPORTED = frozenset({"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
                        "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
                        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_RANGE = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_EBNF_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[A-Za-z_][A-Za-z0-9_]*|.', re.S)
_RULE_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*) ::=", re.M)
_XGR_NOISE = re.compile(r"^\[\d\d:\d\d:\d\d\] \S+:\d+: (Check failed: \(.*?\) is false: )?")  # XGrammar's log prefix
# A string: <|"|> then anything up to the first <|"|> (a DFA over the delimiter's prefixes).
_BASE = r"""gstr ::= "<|\"|>" gq0
gq0 ::= "<" gq1 | [^<] gq0
gq1 ::= "|" gq2 | "<" gq1 | [^<|] gq0
gq2 ::= "\"" gq3 | "<" gq1 | [^<\"] gq0
gq3 ::= "|" gq4 | "<" gq1 | [^<|] gq0
gq4 ::= ">" | "<" gq1 | [^<>] gq0
gint ::= "-"? ("0" | [1-9] [0-9]*)
gnum ::= gint ("." [0-9]+)? ([eE] [+\-]? [0-9]+)?
gkey ::= [A-Za-z_] [A-Za-z0-9_\-.]*
gany ::= gstr | gnum | "true" | "false" | "null" | gobj | garr
gobj ::= "{" "}" | "{" gkey ":" gany ("," gkey ":" gany)* "}"
garr ::= "[" "]" | "[" gany ("," gany)* "]"
"""


def gemma_literal(value: JsonValue) -> str:
    """``value`` (JSON data) in Gemma's notation, as the template's ``format_argument`` writes it."""
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if value is True or value is False or value is None:
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ",".join(gemma_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{gemma_literal(v)}" for k, v in sorted(value.items())) + "}"
    return json.dumps(value)


def _ebnf(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _fits_type(value: JsonValue, t: JsonValue) -> bool:
    """Whether an enum value has the schema's ``type`` (an enum may list values of other types)."""
    if isinstance(t, list):
        return any(_fits_type(value, x) for x in t)
    if t in ("integer", "number"):
        ok = isinstance(value, int) if t == "integer" else isinstance(value, (int, float))
        return ok and not isinstance(value, bool)
    kinds = {"string": str, "boolean": bool, "null": type(None), "object": dict, "array": list}
    return not isinstance(t, str) or t not in kinds or isinstance(value, kinds[t])


class _Grammar:
    """EBNF rules for one tool's arguments; :meth:`value` returns an expression for a schema."""

    def __init__(self, root: Mapping[str, JsonValue]) -> None:
        self.root = root
        self.rules: list[str] = []
        self.refs: dict[str, str] = {}
        self.n = 0

    def fresh(self) -> str:
        self.n += 1
        return f"r{self.n}"

    def value(self, schema: JsonValue, depth: int = 0) -> str:
        if depth > _MAX_DEPTH:
            raise UnsupportedSchema("its schema nests too deep")
        if schema is True or schema is None:
            return "gany"
        if not isinstance(schema, Mapping):
            raise UnsupportedSchema("a schema that allows no value")
        s = {k: v for k, v in schema.items() if k not in _ANNOTATIONS}
        if "$ref" in s:
            return self._ref(s, depth)
        if "const" in s:
            return _ebnf(gemma_literal(s["const"]))
        if "enum" in s:
            values = [v for v in _listed(s["enum"], "enum") if _fits_type(v, s.get("type"))]
            if not values:
                raise UnsupportedSchema("an enum none of whose values fits its type")
            return "(" + " | ".join(_ebnf(gemma_literal(v)) for v in values) + ")"
        for key in ("anyOf", "oneOf"):
            if key in s:
                rest = {k: v for k, v in s.items() if k != key}
                return "(" + " | ".join(self.value({**rest, **b} if isinstance(b, Mapping) else b, depth + 1)
                                        for b in _listed(s[key], key)) + ")"
        if "allOf" in s:
            all_of = _listed(s["allOf"], "allOf")
            if len(all_of) != 1 or not isinstance(all_of[0], Mapping):
                raise UnsupportedSchema("'allOf' with more than one schema")
            return self.value({**{k: v for k, v in s.items() if k != "allOf"}, **all_of[0]}, depth + 1)
        if bad := sorted(set(s) - _SUPPORTED):
            raise UnsupportedSchema(f"Gemma 4's grammar cannot enforce {', '.join(map(repr, bad))}")
        t = s.get("type")
        if isinstance(t, list):
            return "(" + " | ".join(self.value({**s, "type": x}, depth + 1) for x in _listed(t, "type")) + ")"
        if t is None:
            if {"properties", "additionalProperties", "required"} & set(s):
                t = "object"
            elif {"items", "minItems", "maxItems"} & set(s):
                t = "array"
            elif set(_RANGE) & set(s):
                t = "number"
            else:
                return "gany"
        if t == "string":
            return "gstr"
        if t in ("integer", "number"):
            return self._number(s) if set(_RANGE) & set(s) else ("gint" if t == "integer" else "gnum")
        if t == "boolean":
            return '("true" | "false")'
        if t == "null":
            return '"null"'
        if t == "object":
            return self._object(s, depth)
        if t == "array":
            return self._array(s, depth)
        raise UnsupportedSchema(f"unknown type {t!r}")

    def _ref(self, s: Mapping[str, JsonValue], depth: int) -> str:
        ref = s["$ref"]
        if len(s) > 1 or not isinstance(ref, str):
            raise UnsupportedSchema("'$ref' beside other keywords")
        name = self.refs.get(ref)
        if name is None:
            m = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", ref)
            defs = self.root.get(m.group(1)) if m else None  # an object of schemas (where a meta-schema checked it)
            target = defs.get(m.group(2)) if m and isinstance(defs, Mapping) else None
            if target is None:
                raise UnsupportedSchema(f"the reference {ref!r} is not one of its own $defs")
            name = self.refs[ref] = self.fresh()
            self.rules.append(f"{name} ::= {self.value(target, depth + 1)}")
        return name

    def _number(self, s: Mapping[str, JsonValue]) -> str:
        """XGrammar's own grammar for a bounded number (JSON's spelling is Gemma's), renamed."""
        import xgrammar as xgr

        prefix = self.fresh() + "_"
        sub = {k: s[k] for k in ("type", *_RANGE) if k in s}
        try:
            ebnf = str(xgr.Grammar.from_json_schema(json.dumps(sub), any_whitespace=False, strict_mode=True))
        except (RuntimeError, ValueError) as exc:  # XGrammar's refusal (a bound not a number, an empty range)
            reason = _XGR_NOISE.sub("", (str(exc).strip() or "refused").splitlines()[0])
            raise UnsupportedSchema(f"its number range {json.dumps(sub)} cannot be compiled: {reason[:200]}") from None
        names = set(_RULE_NAME.findall(ebnf))
        renamed = "".join(prefix + t if t in names else t for t in _EBNF_TOKEN.findall(ebnf))
        self.rules.extend(line for line in renamed.splitlines() if line.strip())
        return prefix + "root"

    def _object(self, s: Mapping[str, JsonValue], depth: int) -> str:
        props = s.get("properties") or {}
        if not isinstance(props, Mapping):
            raise UnsupportedSchema("its properties are not an object")
        names = _listed(s.get("required") or [], "required")
        if not all(isinstance(n, str) for n in names):
            raise UnsupportedSchema("its required is not a list of names")
        required = {n for n in names if isinstance(n, str)}
        if missing := sorted(required - set(props)):
            raise UnsupportedSchema(f"it requires {', '.join(missing)} without declaring them in its properties")
        extra = s.get("additionalProperties")
        if not props:
            if extra is False:
                return '"{" "}"'
            value = self.value(extra if isinstance(extra, Mapping) else True, depth + 1)
            return f'("{{" "}}" | "{{" gkey ":" {value} ("," gkey ":" {value})* "}}")'
        keys = sorted(props)  # the template's dictsort order
        for key in keys:
            if not _KEY.fullmatch(key):
                raise UnsupportedSchema(f"its property name {key!r} cannot be written bare")
        base = self.fresh()
        for i, key in enumerate(keys):
            pair = f'{_ebnf(key + ":")} {self.value(props[key], depth + 1)}'
            skip = key not in required
            self.rules.append(f"{base}_s{i} ::= {pair} {base}_a{i + 1}" + (f" | {base}_s{i + 1}" if skip else ""))
            self.rules.append(f'{base}_a{i} ::= "," {pair} {base}_a{i + 1}' + (f" | {base}_a{i + 1}" if skip else ""))
        self.rules.append(f'{base}_s{len(keys)} ::= ""')
        self.rules.append(f'{base}_a{len(keys)} ::= ""')
        return f'"{{" {base}_s0 "}}"'

    def _array(self, s: Mapping[str, JsonValue], depth: int) -> str:
        item = self.value(s.get("items", True), depth + 1)
        lo = _count(s.get("minItems", 0), "minItems")
        hi = None if s.get("maxItems") is None else _count(s.get("maxItems"), "maxItems")
        if hi is not None and hi < lo:
            raise UnsupportedSchema("maxItems below minItems")
        if hi == 0:
            return '"[" "]"'
        more = f'("," {item}){{{max(lo - 1, 0)}, {hi - 1 if hi is not None else -1}}}'
        some = f'"[" {item} {more} "]"'
        return f'("[" "]" | {some})' if lo == 0 else some


def _listed(value: JsonValue, keyword: str) -> list[JsonValue]:
    """A keyword's list (``enum``, ``anyOf``, ``type`` ...), non-empty; a schema no meta-schema checked
    (a draft-4 schema's ``$defs``, tools under ``tool_choice: "none"``) may hold anything there."""
    if not isinstance(value, list) or (not value and keyword != "required"):
        raise UnsupportedSchema(f"its {keyword!r} is not a {'' if keyword == 'required' else 'non-empty '}list")
    return value


def _count(value: JsonValue, keyword: str) -> int:
    """``minItems`` / ``maxItems``: a non-negative integer (2.0 too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf") or value % 1:
        raise UnsupportedSchema(f"its {keyword!r} is not a non-negative integer")
    return int(value)


def arguments_grammar(schema: JsonValue) -> str:
    """EBNF (start rule ``root``) for one call's arguments object ``{...}`` in Gemma's notation,
    typed by ``schema``; :class:`UnsupportedSchema` for what it cannot enforce exactly."""
    schema = schema if isinstance(schema, Mapping) else {"type": "object"}
    g = _Grammar(schema)
    top = {k: v for k, v in schema.items() if k not in ("$defs", "definitions")}
    if top.get("type", "object") != "object":
        raise UnsupportedSchema("its parameters are not an object")
    root = g.value({**top, "type": "object"})
    return "\n".join([f"root ::= {root}", *g.rules, _BASE])


@dataclass(frozen=True)
class Gemma4CallFormat(CallFormat):
    """Calls back to back, each ``<|tool_call>call:NAME`` + arguments grammar + ``<tool_call|>``."""

    def structural_tag(self, tools: Sequence[tuple[str, JsonValue]], *, mode: Literal["auto", "required"],
                       parallel: bool, arguments: Callable[[JsonValue], JsonObject]) -> JsonObject | None:
        calls: list[tuple[str, JsonObject]] = []
        for name, schema in tools:
            if not name or _BAD_NAME.search(name) or "{" in name:
                raise UnsupportedSchema(f"The tool name {name!r} cannot be written in Gemma 4's call format.")
            try:
                calls.append((self.call_begin + name, {"type": "grammar", "grammar": arguments_grammar(schema)}))
            except UnsupportedSchema as exc:  # the constraint builder makes it a 400 naming the tools
                raise UnsupportedSchema(f"The tool {name!r} cannot be called in Gemma 4's format: {exc}.") from None

        def one_of(elements: list[JsonObject]) -> JsonObject:
            return elements[0] if len(elements) == 1 else {"type": "or", "elements": [*elements]}

        def const(text: str) -> JsonObject:
            return {"type": "const_string", "value": text}

        whole = one_of([{"type": "sequence", "elements": [const(b), g, const(self.call_end)]} for b, g in calls])
        if mode == "required":
            if not parallel:
                return whole
            return {"type": "sequence", "elements": [whole, {"type": "star", "content": whole}]}
        if not parallel:
            tags: list[JsonValue] = [{"type": "tag", "begin": b, "content": g, "end": self.call_end} for b, g in calls]
        else:  # each tag carries the calls after it, so nothing but calls may follow the first
            nxt = one_of([{"type": "sequence", "elements": [const(self.call_end + b), g]} for b, g in calls])
            more: JsonObject = {"type": "star", "content": nxt}
            tags = [{"type": "tag", "begin": b, "content": {"type": "sequence", "elements": [g, more]},
                     "end": self.call_end} for b, g in calls]
        return {"type": "triggered_tags", "triggers": [self.trigger], "tags": tags, "stop_after_first": True}


Gemma4ToolParser.format = Gemma4CallFormat(
    trigger=TOOL_CALL, section_begin="", call_begin=TOOL_CALL + _CALL, name_end="", call_end=TOOL_CALL_END,
    separator="", section_end="", arguments_style="gemma4")


def _detect(template: str) -> bool:
    return TOOL_CALL in template and QUOTE in template


_GEMMA4_WRITES = ("`<|tool_call>call:f{k:<|\"|>v<|\"|>,n:3,o:{a:true},l:[1,2]}<tool_call|>`, calls back to back after"
                  " optional text: Gemma's notation (keys bare, strings between `<|\"|>` delimiters with no escapes,"
                  " numbers / `true` / `false` / `null` bare; `<|\"|>`-quoted keys and the `None` Jinja writes for "
                  "null are read too); each value typed by the tool's schema and returned as JSON (a top-level "
                  "string streams as written, other values when they close); grammar: the family's own EBNF per "
                  "tool (XGrammar's `gemma_4` tag is disabled upstream), keys in the template's sorted order, no "
                  "whitespace; a tool whose schema it cannot enforce exactly (string `pattern` / `format` / "
                  "`minLength` / `maxLength`, `uniqueItems`, ...) is a 400 naming `tools`; thinking `gemma4` "
                  "(`<|channel>thought\\n...<channel|>`, only with `enable_thinking`)")

FAMILIES = (
    ModelFamily(name="gemma4", reasoning="gemma4", parser=Gemma4ToolParser(), detect=_detect, detect_order=3,
                models="Gemma 4",
                writes=_GEMMA4_WRITES,
                detects="`<|tool_call>` with `<|\"|>`"),
)
