"""Arguments written as text, one parameter at a time (XML styles: Qwen3-Coder, GLM-4.5+),
turned into the OpenAI JSON arguments string; :func:`xml_call` reads one call's parameters for
every such family (the families differ only in their tags, :class:`XmlTags`).

A value is text; the tool's schema says what it means (``5`` is an integer for an
``integer`` parameter and the string ``"5"`` for a ``string`` one), as the model's own
template and XGrammar's XML styles read it. The JSON is written one parameter after
another, so while a call streams its arguments only grow: a complete parameter is
written once it closes, and a string parameter streams as it is written (its text is its
value, nothing can retype it later). Other types are written when their value closes.
"""
from __future__ import annotations

import ast
import copy
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from ._py_literal import PyValue
from ._scan import JsonError, marked_name_end, partial_marker_start, skip_ws
from .base import JsonValue, ToolCallPart, ToolParser

__all__ = ["property_schema", "streams_as_text", "typed_value", "arguments_json", "XmlTags", "xml_call", "xml_text",
           "SchemaBound"]


def property_schema(schema: JsonValue, key: str) -> JsonValue:
    """The schema of parameter ``key`` in a tool's ``parameters`` (None when unknown)."""
    if not isinstance(schema, Mapping):
        return None
    props = schema.get("properties")
    return props.get(key) if isinstance(props, Mapping) else None


# Type names tool schemas use that JSON Schema does not (vLLM's XML parsers read them too).
_ALIASES = {"float": "number", "double": "number", "int": "integer", "bool": "boolean", "dict": "object",
            "list": "array", "str": "string"}


def _types(schema: JsonValue) -> set[str]:
    """The JSON types a schema allows (empty: any, or not said)."""
    if not isinstance(schema, Mapping):
        return set()
    found: set[str] = set()
    t = schema.get("type")
    for name in [t] if isinstance(t, str) else t if isinstance(t, list) else ():
        if isinstance(name, str):
            found.add(_ALIASES.get(name, name))
    if "enum" in schema and isinstance(schema["enum"], list) and not found:
        found.update("string" if isinstance(v, str) else "other" for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if branches:
            for branch in _each(branches):
                found |= _types(branch)
    return found


def _each(value: JsonValue) -> Iterable[JsonValue]:
    """The subschemas a list keyword (``anyOf``, ``oneOf``, ``enum``'s values) holds: a list's items;
    none for any other value (a schema that skipped the meta-schema check, as a request's tools do
    under ``tool_choice: "none"``, may hold anything there)."""
    return value if isinstance(value, list) else ()


def xml_text(value: JsonValue) -> str:
    """A value as the XML styles write it (for ``write``): a string as its raw text, anything else
    as JSON (the schema reads it back as the same value)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def streams_as_text(schema: JsonValue) -> bool:
    """Whether the value is a string whatever its text (unknown parameters are strings too, as
    in vLLM's XML parsers), so it may stream before it closes."""
    types = _types(schema)
    return schema is None or types == {"string"}


def typed_value(text: str, schema: JsonValue) -> JsonValue:
    """The value ``text`` means for a parameter of ``schema``; text that fits no allowed type
    stays a string (the grammar never lets a model write such text). A Python literal's containers
    are taken as they are read (a tuple inside one is written as a JSON array)."""
    types = _types(schema)
    if schema is None or types == {"string"}:
        return text
    stripped = text.strip()
    if stripped.lower() == "null" and (not types or "null" in types):
        return None
    if "boolean" in types and stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(stripped)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if _fits(value, types):
            return value
    return text


def _fits(value: object, types: set[str]) -> bool:
    """Whether ``value`` (any value read so far) is of one of the JSON ``types`` (none: any JSON type),
    and JSON data all through (:func:`_is_json`)."""
    if not _is_json(value):
        return False
    if not types:
        return isinstance(value, (dict, list, int, float, bool, str)) or value is None
    kinds = {
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "null": value is None,
        "string": isinstance(value, str),
    }
    return any(kinds.get(t, False) for t in types)


def _is_json(value: object) -> bool:
    """Whether ``json.dumps`` writes ``value`` as valid JSON: no set, bytes, complex or other Python
    value ``ast.literal_eval`` reads, no NaN or infinity (``json.loads`` reads ``NaN``), no lone
    surrogate; a tuple is an array and an object's scalar keys are written as strings."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if not v.isascii() and not _encodes(v):
                return False
        elif isinstance(v, float):
            if not math.isfinite(v):
                return False
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
            if any(isinstance(k, (list, tuple, dict)) for k in v):
                return False
        elif not (v is None or isinstance(v, (bool, int))):
            return False
    return True


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def arguments_json(done: Sequence[tuple[str, JsonValue | PyValue]], open_text: tuple[str, str] | None = None, *,
                   complete: bool) -> str:
    """The arguments JSON of the parameters ``done`` so far, then a string parameter still
    being written (``open_text``: key, its text so far); closed with ``}`` when ``complete``.
    Each result is a prefix of the next one's, so a stream only appends."""
    parts = [f"{json.dumps(k, ensure_ascii=False)}: {json.dumps(v, ensure_ascii=False)}" for k, v in done]
    if open_text is not None:
        key, text = open_text
        parts.append(f"{json.dumps(key, ensure_ascii=False)}: {json.dumps(text, ensure_ascii=False)[:-1]}")
    return "{" + ", ".join(parts) + ("}" if complete else "")


class SchemaBound(ToolParser):
    """A parser whose arguments are text typed by the request's schemas: :meth:`with_tools` returns
    a copy bound to them (name -> parameters schema)."""

    raw_arguments = False
    _schemas: Mapping[str, JsonValue] = MappingProxyType({})

    def with_tools(self, tools: Mapping[str, JsonValue]) -> ToolParser:
        bound = copy.copy(self)
        bound._schemas = dict(tools)
        return bound


_BAD_KEY = re.compile(r"[<>\n]")


@dataclass(frozen=True)
class XmlTags:
    """How a family writes one parameter (``key_open`` KEY ``key_close`` [``value_open``] VALUE
    ``value_close``) and ends a call's parameters (``call_close``); ``layout`` takes the
    template's layout off a value's text (the last newline is held back while it is open)."""

    key_open: str
    key_close: str
    value_open: str
    value_close: str
    call_close: str
    layout: Callable[[str], str] = str  # as written


def xml_call(text: str, p: int, name: str, schema: JsonValue, tags: XmlTags, *,
             final: bool) -> tuple[ToolCallPart, int | None]:
    """The call ``name`` whose parameters start at ``p``, its arguments typed by ``schema``, and
    where its ``call_close`` ends (None: cut off while streaming); :class:`JsonError` when malformed."""
    done: list[tuple[str, JsonValue]] = []
    r = p
    while True:
        r = skip_ws(text, r)
        if text.startswith(tags.key_open, r):
            k = r + len(tags.key_open)
            k_end = marked_name_end(text, k, tags.key_close, _BAD_KEY, final=final)
            if k_end is None:
                return ToolCallPart(name, arguments_json(done, complete=False), False), None
            key, v = text[k:k_end], k_end + len(tags.key_close)
            if tags.value_open:
                v = skip_ws(text, v)
                if not text.startswith(tags.value_open, v):
                    if not final and tags.value_open.startswith(text[v:]):
                        return ToolCallPart(name, arguments_json(done, complete=False), False), None
                    raise JsonError(f"expected {tags.value_open}", v)
                v += len(tags.value_open)
            prop = property_schema(schema, key)
            v_end = text.find(tags.value_close, v)
            if v_end < 0:
                if final:
                    raise JsonError(f"the text ends inside parameter {key!r}", len(text))
                open_text = None
                if streams_as_text(prop):  # a string: its text so far is its value so far
                    raw = tags.layout(text[v : partial_marker_start(text, (tags.value_close,), v)])
                    open_text = (key, raw)
                return ToolCallPart(name, arguments_json(done, open_text, complete=False), False), None
            done.append((key, typed_value(tags.layout(text[v:v_end]), prop)))
            r = v_end + len(tags.value_close)
        elif text.startswith(tags.call_close, r):
            return ToolCallPart(name, arguments_json(done, complete=True), True), r + len(tags.call_close)
        elif not final and (tags.key_open.startswith(text[r:]) or tags.call_close.startswith(text[r:])):
            return ToolCallPart(name, arguments_json(done, complete=False) if done else "", False), None
        else:
            raise JsonError(f"expected {tags.key_open} or {tags.call_close}", r)
