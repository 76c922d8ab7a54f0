"""MiniMax M2 / M2.5 / M2.7 and MiniMax M3 tool calls (vLLM's ``minimax_m2`` and ``minimax_m3``).

M2 (MiniMax-M2's chat template; XGrammar's ``minimax`` built-in tag)::

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    <parameter name="days">3</parameter>
    </invoke>
    </minimax:tool_call>

M3 writes every element behind the ``]<]minimax[>[`` marker and names a parameter by its element,
which may nest (an object's properties as child elements, an array's items as ``<item>``)::

    ]<]minimax[>[<tool_call>
    ]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris]<]minimax[>[</city>
    ]<]minimax[>[<opts>]<]minimax[>[<units>metric]<]minimax[>[</units>]<]minimax[>[</opts>
    ]<]minimax[>[</invoke>
    ]<]minimax[>[</tool_call>

A value is text typed by the tool's schema (:mod:`tool_parsers._xml_args`, as qwen3_coder's): the
parser is bound to the request's tools and returns OpenAI JSON. M2's arguments only grow while
streaming (a string value as it is written, others when they close). M3's are sent once the
``</invoke>`` arrives, as vLLM's: a repeated element turns an earlier value into a list, so no
prefix of them is settled before. A call that breaks is content up to the section's end marker.
The grammar is XGrammar's ``minimax_xml`` / ``minimax_m3_xml`` argument style in the layout of
its built-in ``minimax`` / ``minimax_m3`` tags. M2 thinks in ``<think>`` .. ``</think>``, the
prompt opening the block (``deepseek_r1``); M3 in ``<mm:think>`` .. ``</mm:think>`` (``minimax_m3``).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, TypeAlias

from ._blocks import SectionToolParser
from ._scan import JsonError, marked_name_end, skip_ws
from ._xml_args import SchemaBound, XmlTags, _each, _types, property_schema, typed_value, xml_call, xml_text
from .base import CallFormat, JsonObject, JsonValue, ModelFamily, ToolCallPart

__all__ = ["MiniMaxCallFormat", "MiniMaxM2ToolParser", "MiniMaxM3ToolParser", "NAMESPACE", "m3_arguments",
           "FAMILIES"]

NAMESPACE = "]<]minimax[>["
_NAME_END = '">'
_BAD_NAME = re.compile(r'[<>\n"]')
_M2_TAGS = XmlTags(key_open='<parameter name="', key_close='">', value_open="", value_close="</parameter>",
                   call_close="</invoke>")
_MAX_DEPTH = 64


@dataclass(frozen=True)
class MiniMaxCallFormat(CallFormat):
    """XGrammar's built-in MiniMax layout: under ``required`` the section may follow the
    template's newline."""

    def structural_tag(self, tools: Sequence[tuple[str, JsonValue]], *, mode: Literal["auto", "required"],
                       parallel: bool, arguments: Callable[[JsonValue], JsonObject]) -> JsonObject | None:
        calls: list[JsonValue] = [{"type": "tag", "begin": self.call_begin + name + self.name_end,
                                   "content": arguments(schema), "end": self.call_end} for name, schema in tools]
        inner: JsonObject = {"type": "tags_with_separator", "tags": calls, "separator": "", "at_least_one": True,
                             "stop_after_first": not parallel}
        section: JsonObject = {"type": "tag", "begin": self.section_begin, "content": inner, "end": self.section_end}
        if mode == "required":
            return {"type": "sequence", "elements": [
                {"type": "optional", "content": {"type": "const_string", "value": "\n"}}, section]}
        return {"type": "triggered_tags", "triggers": [self.trigger], "tags": [section], "stop_after_first": True}


class MiniMaxM2ToolParser(SchemaBound, SectionToolParser):
    """One ``<minimax:tool_call>`` section of ``<invoke>`` calls with ``<parameter>`` values."""

    name: ClassVar[str] = "minimax_m2"
    start: ClassVar[str] = "<minimax:tool_call>"
    end: ClassVar[str] = "</minimax:tool_call>"
    call_open: ClassVar[str] = '<invoke name="'
    format: ClassVar[CallFormat] = MiniMaxCallFormat(
        trigger="<minimax:tool_call>", section_begin="<minimax:tool_call>\n", call_begin='<invoke name="',
        name_end='">\n', call_end="</invoke>\n", separator="", section_end="</minimax:tool_call>",
        arguments_style="minimax_xml")

    def write_arguments(self, arguments: Mapping[str, JsonValue]) -> str:
        """A ``<parameter name="k">`` line per argument (a string raw, anything else as JSON)."""
        return "".join(f'<parameter name="{k}">{xml_text(v)}</parameter>\n' for k, v in arguments.items())

    def _call(self, text: str, p: int, *, final: bool) -> tuple[ToolCallPart, int | None]:
        q = marked_name_end(text, p, _NAME_END, _BAD_NAME, final=final)
        if q is None:
            return ToolCallPart(None, "", False), None
        name = text[p:q]
        return xml_call(text, q + len(_NAME_END), name, self._schemas.get(name), _M2_TAGS, final=final)


# --- M3: nested elements --------------------------------------------------------------------------

_OPEN, _CLOSE = NAMESPACE + "<", NAMESPACE + "</"
_ELEMENT = re.compile(re.escape(_OPEN) + r"([^<>/\s\"][^<>\s\"]*)>")
_Element: TypeAlias = "str | list[tuple[str, _Element]]"  # an element's text, or its (name, element) children


def _element(text: str, p: int, depth: int, *, final: bool) -> tuple[str, _Element, int] | None:
    """The element whose opening tag starts at ``p``: name, value and where it ends (None: cut off
    while streaming); :class:`JsonError` when malformed."""
    if depth > _MAX_DEPTH:
        raise JsonError("elements nest too deep", p)
    m = _ELEMENT.match(text, p)
    if m is None:
        if not final and text.find(">", p + len(_OPEN)) < 0:  # (the marker itself holds a '>')
            return None
        raise JsonError("expected a parameter element", p)
    name, close = m.group(1), f"{_CLOSE}{m.group(1)}>"
    pos, parts, children = m.end(), [], []
    while True:
        at = text.find(NAMESPACE, pos)
        if at < 0:
            if final:
                raise JsonError(f"the text ends inside element {name!r}", len(text))
            return None
        parts.append(text[pos:at])
        if text.startswith(close, at):
            pos = at + len(close)
            break
        if text.startswith(_CLOSE, at) or not text.startswith(_OPEN, at):
            if not final and (close.startswith(text[at:]) or _OPEN.startswith(text[at:])):
                return None
            raise JsonError(f"expected {close!r} or a child element", at)
        child = _element(text, at, depth + 1, final=final)
        if child is None:
            return None
        children.append(child[:2])
        pos = child[2]
    body = "".join(parts)
    if not children:
        return name, body, pos
    if body.strip():
        raise JsonError(f"element {name!r} mixes text and child elements", p)
    return name, children, pos


def _container(schema: JsonValue) -> str | None:
    """``array`` or ``object`` when the schema allows one (the first found), else None."""
    if not isinstance(schema, dict):
        return None
    types = _types(schema)
    for kind in ("array", "object"):
        if kind in types:
            return kind
    if not types:
        if "items" in schema:
            return "array"
        if "properties" in schema or "additionalProperties" in schema:
            return "object"
    return None


def _branch(schema: JsonValue, kind: str) -> JsonValue:
    """The ``kind`` alternative of a schema (itself, or its anyOf / oneOf branch)."""
    for key in ("anyOf", "oneOf"):
        for b in _each(schema.get(key) or []) if isinstance(schema, dict) else ():
            if _container(b) == kind:
                return _branch(b, kind)
    return schema


def _value(element: _Element, schema: JsonValue) -> JsonValue:
    """An element typed by ``schema``: text as qwen3_coder's values; children as an array of
    items or an object of properties."""
    kind = _container(schema)
    if isinstance(element, str):
        if kind is not None and not element.strip() and "string" not in _types(schema):
            return [] if kind == "array" else {}  # the template writes an empty list or dict as nothing
        return typed_value(element, schema)
    if kind == "array":
        branch = _branch(schema, "array")  # a dict: the schema allows an array
        items = branch.get("items") if isinstance(branch, dict) else None
        return [_value(child, items) for _, child in element]
    return _object(element, _branch(schema, "object") if kind else None)


def _object(elements: list[tuple[str, _Element]], schema: JsonValue) -> JsonObject:
    """Named elements as an object; a repeated name collects its values in a list (as vLLM)."""
    extra = schema.get("additionalProperties") if isinstance(schema, dict) else None
    out: JsonObject = {}
    repeated: dict[str, list[JsonValue]] = {}  # a repeated name's list (the one in ``out``)
    for key, element in elements:
        prop = property_schema(schema, key)
        value = _value(element, prop if prop is not None else (extra if isinstance(extra, dict) else None))
        if key not in out:
            out[key] = value
        elif key in repeated:
            repeated[key].append(value)
        else:
            out[key] = repeated[key] = [out[key], value]
    return out


def _m3_element(key: str, value: JsonValue) -> str:
    if isinstance(value, Mapping):
        inner = "".join(_m3_element(k, v) for k, v in value.items())
    elif isinstance(value, list):
        inner = "".join(_m3_element("item", v) for v in value)
    else:
        inner = xml_text(value)
    return f"{NAMESPACE}<{key}>{inner}{NAMESPACE}</{key}>"


def m3_arguments(text: str, p: int, schema: JsonValue, *, final: bool) -> tuple[str | None, int | None]:
    """The arguments JSON of the M3 parameter elements from ``p`` to the ``</invoke>`` and where
    that ends; (None, None) when cut off while streaming. :class:`JsonError` when malformed."""
    params: list[tuple[str, _Element]] = []
    close = _CLOSE + "invoke>"
    r = p
    while True:
        r = skip_ws(text, r)
        if text.startswith(close, r):
            return json.dumps(_object(params, schema), ensure_ascii=False), r + len(close)
        if text.startswith(_OPEN, r) and not text.startswith(_CLOSE, r):
            found = _element(text, r, 1, final=final)
            if found is None:
                return None, None
            params.append(found[:2])
            r = found[2]
        elif not final and (close.startswith(text[r:]) or _OPEN.startswith(text[r:])):
            return None, None
        else:
            raise JsonError(f"expected a parameter element or {close!r}", r)


class MiniMaxM3ToolParser(SchemaBound, SectionToolParser):
    """One ``]<]minimax[>[<tool_call>`` section of ``<invoke>`` calls with element parameters."""

    name: ClassVar[str] = "minimax_m3"
    start: ClassVar[str] = NAMESPACE + "<tool_call>"
    end: ClassVar[str] = NAMESPACE + "</tool_call>"
    call_open: ClassVar[str] = NAMESPACE + '<invoke name="'
    format: ClassVar[CallFormat] = MiniMaxCallFormat(
        trigger=NAMESPACE + "<tool_call>", section_begin=NAMESPACE + "<tool_call>\n",
        call_begin=NAMESPACE + '<invoke name="', name_end='">', call_end=NAMESPACE + "</invoke>\n", separator="",
        section_end=NAMESPACE + "</tool_call>", arguments_style="minimax_m3_xml")

    def write_arguments(self, arguments: Mapping[str, JsonValue]) -> str:
        """An element per argument behind the namespace marker; objects and arrays nest (an array's
        values as ``<item>`` elements), as XGrammar's ``minimax_m3_xml`` style writes them."""
        return "".join(_m3_element(k, v) + "\n" for k, v in arguments.items())

    def _call(self, text: str, p: int, *, final: bool) -> tuple[ToolCallPart, int | None]:
        q = marked_name_end(text, p, _NAME_END, _BAD_NAME, final=final)
        if q is None:
            return ToolCallPart(None, "", False), None
        name = text[p:q]
        arguments, end = m3_arguments(text, q + len(_NAME_END), self._schemas.get(name), final=final)
        if arguments is None:
            return ToolCallPart(name, "", False), None
        return ToolCallPart(name, arguments, True), end


def _detect_m2(template: str) -> bool:
    return "<minimax:tool_call>" in template


def _detect_m3(template: str) -> bool:
    return NAMESPACE in template


_MINIMAX_M2_WRITES = ("`<minimax:tool_call>\\n<invoke name=\"f\">\\n<parameter "
                      "name=\"k\">v</parameter>\\n</invoke>\\n</minimax:tool_call>`; each value typed by the tool's schema "
                      "and returned as JSON (a string streams as written, others when they close)")
_MINIMAX_M3_WRITES = ("every element behind `]<]minimax[>[`: `]<]minimax[>[<tool_call>\\n]<]minimax[>[<invoke "
                      "name=\"f\">]<]minimax[>[<k>v]<]minimax[>[</k>\\n]<]minimax[>[</invoke>\\n]<]minimax[>[</tool_call>`;"
                      " a parameter is an element named by its key, nesting children for objects and `<item>`s for "
                      "arrays (an empty element of an array / object parameter is `[]` / `{}`, a repeated element "
                      "collects a list, as vLLM's); typed by the tool's schema; a call's arguments are sent whole when "
                      "its `</invoke>` arrives; XGrammar's `minimax_m3_xml` style takes objects with fixed property "
                      "names only (`additionalProperties` objects are a 400 naming `tools`)")

FAMILIES = (
    ModelFamily(name="minimax_m2", reasoning="deepseek_r1", parser=MiniMaxM2ToolParser(), detect=_detect_m2,
                detect_order=3,
                models="MiniMax M2, M2.5, M2.7",
                writes=_MINIMAX_M2_WRITES,
                detects="`<minimax:tool_call>`"),
    ModelFamily(name="minimax_m3", reasoning="minimax_m3", parser=MiniMaxM3ToolParser(), detect=_detect_m3,
                detect_order=3,
                models="MiniMax M3",
                writes=_MINIMAX_M3_WRITES,
                detects="`]<]minimax[>[`"),
)
