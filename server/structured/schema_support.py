"""Which JSON Schema keywords the shipped XGrammar enforces exactly, loosely, or refuses.

``strict: true`` promises that a schema is never enforced more loosely than it says, so the
server must know, per keyword *and value*, what the grammar really does. The table below is
measured, not guessed: ``python -m evals.schema_keywords --out DIR`` runs the official
JSON-Schema-Test-Suite and labelled JSONSchemaBench instances through xgrammar's matcher
(results in docs/schema_support.md). Levels:

* ``EXACT``      the grammar accepts exactly the instances the keyword allows (up to key order);
* ``LOOSE``      compiled, but some instances the keyword forbids get through;
* ``REJECTED``   xgrammar refuses to compile it;
* ``ANNOTATION`` no effect on validity (title, description, ...; unknown keywords too).

``analyze_schema`` walks a schema (local ``$ref`` resolved, recursion-safe) and reports each
keyword use with its JSON pointer; ``strict_problems()`` lists the uses that make a strict
request fail closed. ``normalize_schema`` applies rewrites that keep the set of valid
instances and that were verified with the matcher to turn loose uses exact.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeGuard

from server.json_types import JsonMapping, JsonObject, JsonValue
from server.structured.schema_refs import escape_token, local_validator, resolve_ref
from server.structured.schema_rewrite import rewrite_schema

__all__ = [
    "EXACT", "LOOSE", "REJECTED", "ANNOTATION", "XGRAMMAR_VERSION", "KEYWORD_LEVELS", "KeywordUse", "SchemaReport",
    "analyze_schema", "declare_required", "normalize_schema", "walk_schemas", "child_schemas",
]

EXACT = "EXACT"
LOOSE = "LOOSE"
REJECTED = "REJECTED"
ANNOTATION = "ANNOTATION"

#: The xgrammar release the table was measured on; re-run the eval when it changes.
XGRAMMAR_VERSION = "0.2.8"

ANNOTATION_KEYWORDS = frozenset(
    {
        "title", "description", "examples", "default", "$schema", "$id", "$comment",
        "deprecated", "readOnly", "writeOnly", "$anchor", "$vocabulary",
        "contentMediaType", "contentEncoding", "contentSchema",  # annotations in 2020-12
        "$defs", "definitions",  # containers: members are checked where they are referenced
    }
)

#: Baseline level per keyword, measured with ``evals/schema_keywords.py`` on xgrammar 0.2.8
#: (counts in docs/schema_support.md). Value- and sibling-dependent refinements live in
#: ``_level``: e.g. type-specific keywords are only enforced when ``type`` is declared.
KEYWORD_LEVELS: dict[str, tuple[str, str]] = {
    "type": (EXACT, ""),
    "enum": (EXACT, ""),
    "const": (EXACT, ""),
    "properties": (EXACT, ""),
    "required": (EXACT, ""),
    "additionalProperties": (EXACT, ""),
    "items": (EXACT, ""),
    "prefixItems": (EXACT, ""),
    "minItems": (EXACT, ""),
    "maxItems": (EXACT, ""),
    "minLength": (EXACT, ""),
    "maxLength": (EXACT, ""),
    "pattern": (EXACT, "full-match: an unanchored pattern is stricter than JSON Schema's search"),
    "format": (EXACT, ""),
    "minimum": (EXACT, ""),
    "maximum": (EXACT, ""),
    "exclusiveMinimum": (EXACT, ""),
    "exclusiveMaximum": (EXACT, ""),
    "multipleOf": (EXACT, ""),
    "anyOf": (EXACT, ""),
    "oneOf": (LOOSE, "oneOf is enforced as anyOf unless its branches have disjoint types"),
    "allOf": (LOOSE, "allOf with several subschemas is not fully enforced"),
    "not": (LOOSE, "not is ignored"),
    "if": (LOOSE, "if/then/else is ignored"),
    "then": (EXACT, "only acts through if"),
    "else": (EXACT, "only acts through if"),
    "uniqueItems": (LOOSE, "uniqueItems is ignored"),
    "contains": (LOOSE, "contains is ignored"),
    "minContains": (LOOSE, "minContains is ignored"),
    "maxContains": (LOOSE, "maxContains is ignored"),
    "minProperties": (EXACT, ""),
    "maxProperties": (EXACT, ""),
    "patternProperties": (EXACT, "over-strict: keys must fully match a pattern"),
    "propertyNames": (EXACT, ""),
    "dependentRequired": (LOOSE, "dependentRequired is ignored"),
    "dependentSchemas": (LOOSE, "dependentSchemas is ignored"),
    "dependencies": (LOOSE, "dependencies is ignored"),
    "unevaluatedProperties": (LOOSE, "unevaluatedProperties is ignored unless strict_mode"),
    "unevaluatedItems": (LOOSE, "unevaluatedItems is ignored unless strict_mode"),
    "additionalItems": (LOOSE, "additionalItems (draft 2019 and older) is ignored"),
    "$ref": (EXACT, ""),
    "$dynamicRef": (LOOSE, "$dynamicRef is not resolved"),
    "$dynamicAnchor": (ANNOTATION, ""),
}

#: ``format`` values: EXACT where no invalid sample got through, LOOSE where one did
#: (e.g. 2024-02-30 for date, 01.1.1.1 for ipv4, a 64-letter label for hostname).
FORMAT_LEVELS: dict[str, tuple[str, str]] = {
    "email": (EXACT, "stricter than RFC 5321 (e.g. a@b.c is refused)"),
    "ipv6": (EXACT, ""),
    "uuid": (EXACT, ""),
    "time": (EXACT, ""),
    "uri": (EXACT, ""),
    "uri-reference": (EXACT, ""),
    "json-pointer": (EXACT, ""),
    "relative-json-pointer": (EXACT, ""),
    "duration": (EXACT, "stricter than RFC 3339 (fractional seconds refused)"),
    "uri-template": (EXACT, ""),
    "date": (LOOSE, "day of month not checked (2024-02-30 gets through)"),
    "date-time": (LOOSE, "day of month not checked (2024-02-30T00:00:00Z gets through)"),
    "ipv4": (LOOSE, "leading zeros get through (01.1.1.1)"),
    "hostname": (LOOSE, "label length not checked (63 characters max)"),
    "idn-email": (LOOSE, "not checked"),
    "idn-hostname": (LOOSE, "not checked"),
    "iri": (LOOSE, "not checked"),
    "iri-reference": (LOOSE, "not checked"),
    "regex": (LOOSE, "not checked"),
}

STRING_KEYWORDS = frozenset({"minLength", "maxLength", "pattern", "format"})
NUMBER_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
ARRAY_KEYWORDS = frozenset({"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains",
                            "minContains", "maxContains", "unevaluatedItems", "additionalItems"})
OBJECT_KEYWORDS = frozenset({"properties", "required", "additionalProperties", "patternProperties",
                             "minProperties", "maxProperties", "propertyNames", "dependentRequired",
                             "dependentSchemas", "unevaluatedProperties", "dependencies"})
_KEYWORD_TYPE = {**{k: "string" for k in STRING_KEYWORDS}, **{k: "number" for k in NUMBER_KEYWORDS},
                 **{k: "array" for k in ARRAY_KEYWORDS}, **{k: "object" for k in OBJECT_KEYWORDS}}
#: Without ``type``, these keywords make the grammar assume the type (measured: stricter, not looser).
_TYPE_IMPLYING = {"properties": "object", "items": "array"}
_APPLICATORS = ("allOf", "anyOf", "oneOf", "not", "if", "$ref", "$dynamicRef", "dependentSchemas")
_SUBSCHEMA = ("additionalProperties", "unevaluatedProperties", "items", "contains", "propertyNames", "not", "if",
              "then", "else", "unevaluatedItems", "additionalItems")
_SUBSCHEMA_MAP = ("properties", "patternProperties", "dependentSchemas")
_SUBSCHEMA_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")


@dataclass(frozen=True)
class KeywordUse:
    """One keyword at one place: ``pointer`` is the JSON pointer of the schema holding it."""

    pointer: str
    keyword: str
    level: str
    note: str = ""

    def message(self) -> str:
        where = self.pointer or "/"
        if self.level == REJECTED:
            return f"{self.keyword} at {where} is not supported by the grammar compiler: {self.note}"
        detail = f" ({self.note})" if self.note else ""
        return f"{self.keyword} at {where} is not enforced by the grammar{detail}"


@dataclass
class SchemaReport:
    """Every keyword use found in a schema, with its support level."""

    entries: list[KeywordUse] = field(default_factory=list)

    @property
    def loose(self) -> list[KeywordUse]:
        return [e for e in self.entries if e.level == LOOSE]

    @property
    def rejected(self) -> list[KeywordUse]:
        return [e for e in self.entries if e.level == REJECTED]

    def strict_problems(self) -> list[str]:
        """Messages for the uses that a strict request must refuse (LOOSE or REJECTED)."""
        return [e.message() for e in self.entries if e.level in (LOOSE, REJECTED)]


_resolve_local = resolve_ref  # one resolver (RFC 6901 + percent-decoding) for every schema walker


def _types(schema: JsonMapping) -> set[str] | None:
    t = schema.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        names = [x for x in t if isinstance(x, str)]
        return set(names) if len(names) == len(t) else None
    return None


def _applies(kw_type: str, types: set[str]) -> bool:
    if kw_type == "number":
        return bool(types & {"number", "integer"})
    return kw_type in types


_ESCAPED_NAME = re.compile(r'["\\\x00-\x1f]')
_REGEX_UNSUPPORTED = re.compile(r"\(\?[=!]|\(\?<[=!]|\\[1-9]|\\k<|\\[bB]|\\[pP]\{")


def _pattern_problem(pattern: str) -> str:
    """Why xgrammar would ignore part of ``pattern`` (lookaround, backrefs, mid anchors...)."""
    if _REGEX_UNSUPPORTED.search(pattern):
        return "lookaround, backreference, word boundary or \\p{} is ignored by the grammar"
    depth_class = False
    escaped = False
    for i, ch in enumerate(pattern):
        if escaped:
            escaped = False
            continue
        if ch == "\\":
            escaped = True
        elif ch == "[" and not depth_class:
            depth_class = True
        elif ch == "]" and depth_class:
            depth_class = False
        elif not depth_class and ch == "^" and i != 0:
            return "'^' not at the start is ignored by the grammar"
        elif not depth_class and ch == "$" and i != len(pattern) - 1:
            return "'$' not at the end is ignored by the grammar"
    return ""


def _enum_values(schema: JsonMapping) -> list[JsonValue] | None:
    if "const" in schema:
        return [schema["const"]]
    listed = schema.get("enum")
    return list(listed) if isinstance(listed, list) else None


def _enum_covers(values: list[JsonValue], schema: JsonMapping, keyword: str) -> bool:
    """Whether every enum/const value satisfies ``keyword`` (then ignoring it loses nothing)."""
    sub: JsonObject = {keyword: schema[keyword]}
    if keyword in ("minContains", "maxContains") and "contains" in schema:
        sub["contains"] = schema["contains"]
    if "$ref" in json.dumps(sub):
        return False
    try:
        v = local_validator(sub)
        return all(v.is_valid(x) for x in values)
    except Exception:  # noqa: BLE001 - an odd keyword value: not provably covered
        return False


#: Keywords that assert nothing by themselves beside an applicator (``type`` is intersected).
_QUIET_SIBLINGS = ANNOTATION_KEYWORDS | {"type", "$defs", "definitions", "format"}


def _asserting_siblings(schema: JsonMapping, keyword: str) -> bool:
    """Whether ``schema`` asserts more than ``keyword`` (and its type): XGrammar compiles an
    applicator's branches without the sibling keywords (measured on MaskBench: required beside
    anyOf, required beside a one-branch allOf)."""
    return any(k not in _QUIET_SIBLINGS and k != keyword and k in KEYWORD_LEVELS for k in schema)


def _type_sets_disjoint(branches: list[JsonValue], root: JsonValue) -> bool:
    seen: list[set[str]] = []
    for b in branches:
        if isinstance(b, dict) and isinstance(ref := b.get("$ref"), str) and len(b) == 1:
            target = _resolve_local(root, ref)
            b = target[1] if target else None
        types = _types(b) if isinstance(b, dict) else None
        if not types:
            return False
        if "number" in types:
            types = types | {"integer"}
        if any(types & other for other in seen):
            return False
        seen.append(types)
    return True


@dataclass(frozen=True)
class _Ctx:
    root: JsonValue
    strict_mode: bool
    nested_ids: bool


def _level(keyword: str, value: JsonValue, schema: JsonMapping, ctx: _Ctx) -> tuple[str, str]:
    """Level of ``keyword: value`` inside ``schema`` (siblings matter for many keywords)."""
    if keyword in ANNOTATION_KEYWORDS:
        return ANNOTATION, ""
    if keyword not in KEYWORD_LEVELS:
        return ANNOTATION, "unknown keyword: ignored by JSON Schema and by the grammar"
    level, note = KEYWORD_LEVELS[keyword]
    if level == ANNOTATION:
        return level, note
    if keyword == "$ref":
        if not isinstance(value, str) or _resolve_local(ctx.root, value) is None:
            return LOOSE, f"reference {value!r} is not a resolvable local JSON pointer; it is treated as any value"
        if ctx.nested_ids:
            return LOOSE, "a nested $id changes the base URI, which the grammar does not follow"
        return EXACT, ""
    if "$ref" in schema and keyword not in ("type", "enum", "const"):
        return LOOSE, "keywords next to $ref are ignored by the grammar"
    values = _enum_values(schema)
    if keyword == "type" and values is not None and not _enum_covers(values, schema, "type"):
        return LOOSE, "ignored next to enum/const, and some listed values are not of this type"
    if keyword in ("allOf", "anyOf", "oneOf") and _asserting_siblings(schema, keyword):
        return LOOSE, f"keywords beside {keyword} are not intersected with its branches by the grammar"
    if values is not None and keyword not in ("type", "enum", "const"):
        if _enum_covers(values, schema, keyword):
            return EXACT, "every enum/const value satisfies it"
        return LOOSE, "ignored next to enum/const, and some listed values violate it"
    kw_type = _KEYWORD_TYPE.get(keyword)
    if kw_type is not None:
        types = _types(schema)
        if types is None:
            implied = {t for k, t in _TYPE_IMPLYING.items() if k in schema}
            if kw_type not in implied:
                return LOOSE, f'only enforced when the same schema declares "type" (add "type": "{kw_type}")'
        elif not _applies(kw_type, types):
            return EXACT, "does not apply to the declared type"
    if keyword in ("minLength", "maxLength") and ("pattern" in schema or _known_format(schema)):
        return LOOSE, "length limits are ignored when combined with pattern or format"
    if keyword == "pattern":
        if _known_format(schema):
            return LOOSE, "a pattern beside a known format is dropped by the grammar"
        problem = _pattern_problem(value) if isinstance(value, str) else "pattern must be a string"
        return (LOOSE, problem) if problem else (level, note)
    if keyword == "format":
        if not isinstance(value, str) or value not in FORMAT_LEVELS:
            return ANNOTATION, "unknown format: an annotation in JSON Schema and for the grammar"
        return FORMAT_LEVELS[value]
    if keyword == "multipleOf":
        types = _types(schema) or set()
        if "number" in types:
            return LOOSE, "multipleOf is ignored for type number"
        if not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            return LOOSE, "a fractional multipleOf is ignored"
        if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
            return LOOSE, "multipleOf is ignored when combined with a range"
        return EXACT, ""
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        types = _types(schema) or set()
        if "integer" in types and "number" not in types and isinstance(value, float) and not value.is_integer():
            return REJECTED, "a fractional bound on an integer does not compile (normalize_schema rounds it)"
        return EXACT, ""
    if keyword == "required":
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        missing = [n for n in value if not isinstance(n, str) or n not in props] if isinstance(value, list) else []
        if missing:
            return LOOSE, f"required names missing from properties are not enforced: {missing}"
        return EXACT, ""
    if keyword == "properties" and isinstance(value, dict):
        odd = [n for n in value if _ESCAPED_NAME.search(n)]
        if odd:
            return LOOSE, f"property names that need JSON escapes are not matched: {odd}"
        return level, note
    if keyword == "patternProperties":
        if value and "properties" in schema:
            return LOOSE, "patternProperties is ignored next to properties"
        odd = [k for k in value if _pattern_problem(k)] if isinstance(value, dict) else []
        if odd:
            return LOOSE, f"patterns the grammar cannot follow: {odd}"
        return level, note
    if keyword in ("unevaluatedProperties", "unevaluatedItems"):
        if value is True:
            return EXACT, "no effect"
        if ctx.strict_mode and value is False and not any(k in schema for k in _APPLICATORS):
            return EXACT, "strict_mode forbids everything not declared"
        return level, note
    if keyword == "items" and isinstance(value, list):
        return REJECTED, "array-form items (draft 2019 and older) does not compile; use prefixItems"
    if keyword == "uniqueItems":
        most = schema.get("maxItems")
        if value is not True or (isinstance(most, int) and most <= 1):
            return EXACT, "no effect"
        return level, note
    if keyword == "allOf":
        alone = not any(k in schema for k in ("anyOf", "oneOf"))
        return (EXACT, "") if isinstance(value, list) and len(value) == 1 and alone else (level, note)
    if keyword == "oneOf":
        if isinstance(value, list) and (len(value) == 1 or _type_sets_disjoint(value, ctx.root)):
            return EXACT, "branches have disjoint types"
        return level, note
    if keyword == "if" and "then" not in schema and "else" not in schema:
        return EXACT, "no effect without then/else"
    if keyword in ("dependentRequired", "dependentSchemas", "dependencies") and not value:
        return EXACT, "no effect"
    return level, note


def _known_format(schema: JsonMapping) -> bool:
    """Whether ``schema`` names a format the grammar knows (a ``format`` of another type: none)."""
    return isinstance(fmt := schema.get("format"), str) and fmt in FORMAT_LEVELS


def child_schemas(schema: JsonMapping, pointer: str) -> Iterator[tuple[str, JsonValue]]:
    """The direct subschemas of ``schema`` with their JSON pointers (``$defs`` not included)."""
    return _children(schema, pointer)


def _children(schema: JsonMapping, pointer: str) -> Iterator[tuple[str, JsonValue]]:
    for k in _SUBSCHEMA:
        if isinstance(one := schema.get(k), (dict, bool)):
            yield f"{pointer}/{k}", one
    for k in _SUBSCHEMA_MAP:
        if isinstance(named := schema.get(k), dict):
            for name, sub in named.items():
                yield f"{pointer}/{k}/{escape_token(name)}", sub
    for k in (*_SUBSCHEMA_LIST, "items"):
        if isinstance(listed := schema.get(k), list):
            for i, sub in enumerate(listed):
                yield f"{pointer}/{k}/{i}", sub


def _has_nested_id(schema: JsonValue, top: bool = True) -> bool:
    if isinstance(schema, dict):
        if not top and isinstance(schema.get("$id"), str):
            return True
        return any(_has_nested_id(v, False) for k, v in schema.items() if k not in ("enum", "const", "examples", "default"))
    if isinstance(schema, list):
        return any(_has_nested_id(v, False) for v in schema)
    return False


def analyze_schema(schema: JsonObject, *, strict_mode: bool = False) -> SchemaReport:
    """Report every keyword use reachable from the root, local ``$ref`` targets included once.

    ``strict_mode`` is xgrammar's compile option of that name (undeclared properties and
    items forbidden), which makes ``unevaluatedProperties: false`` exact.
    """
    report = SchemaReport()
    ctx = _Ctx(root=schema, strict_mode=strict_mode, nested_ids=_has_nested_id(schema))
    seen: set[str] = set()
    stack: list[tuple[str, JsonValue]] = [("", schema)]
    while stack:
        pointer, node = stack.pop()
        if pointer in seen or not isinstance(node, dict):
            continue
        seen.add(pointer)
        for kw, value in node.items():
            level, note = _level(kw, value, node, ctx)
            report.entries.append(KeywordUse(pointer, kw, level, note))
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = _resolve_local(schema, ref)
            if target is not None:
                stack.append(target)
        stack.extend(reversed(list(_children(node, pointer))))
    report.entries.sort(key=lambda e: (e.pointer, e.keyword))
    return report


_DROPPABLE = frozenset({"title", "description", "examples", "default", "$comment", "deprecated", "readOnly", "writeOnly"})


def walk_schemas(schema: JsonValue) -> Iterator[JsonObject]:
    """Every schema object in the document, $defs included (each visited once)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield node
        stack.extend(sub for _, sub in _children(node, ""))
        for k in ("$defs", "definitions"):
            if isinstance(defs := node.get(k), dict):
                stack.extend(defs.values())


def _round_integer_bounds(node: JsonObject) -> None:
    types = _types(node) or set()
    if "integer" not in types or "number" in types:
        return
    lo = [math.ceil(v) for k, v in node.items() if k == "minimum" and _num(v)]
    lo += [math.floor(v) + 1 for k, v in node.items() if k == "exclusiveMinimum" and _num(v)]
    hi = [math.floor(v) for k, v in node.items() if k == "maximum" and _num(v)]
    hi += [math.ceil(v) - 1 for k, v in node.items() if k == "exclusiveMaximum" and _num(v)]
    fractional = any(isinstance(bound := node.get(k), float) and not bound.is_integer()
                     for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"))
    if not fractional:
        return
    for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        node.pop(k, None)
    if lo:
        node["minimum"] = max(lo)
    if hi:
        node["maximum"] = min(hi)


def _num(v: JsonValue) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def declare_required(node: JsonObject) -> None:
    """Required names missing from ``properties`` declared there (XGrammar enforces only declared ones)."""
    req = node.get("required")
    props = node.get("properties", {})
    if not isinstance(req, list) or not isinstance(props, dict) or "patternProperties" in node:
        return
    extra = node.get("additionalProperties", True)
    if extra is False or "unevaluatedProperties" in node:
        return
    missing = [n for n in req if isinstance(n, str) and n not in props]
    if missing:
        node["properties"] = {**props, **{n: copy.deepcopy(extra) if isinstance(extra, dict) else {} for n in missing}}


def _filter_enum(node: JsonObject) -> None:
    values = node.get("enum")
    if not isinstance(values, list):
        return
    rest = {k: v for k, v in node.items() if k not in ("enum", "const") and k not in ANNOTATION_KEYWORDS}
    if not rest or "$ref" in json.dumps(rest):
        return
    try:
        v = local_validator(rest)
        kept = [x for x in values if v.is_valid(x)]
    except Exception:  # noqa: BLE001 - leave an odd schema alone
        return
    if kept:
        node["enum"] = kept


def _unevaluated_to_additional(node: JsonObject) -> None:
    if any(k in node for k in _APPLICATORS):
        return
    if "unevaluatedProperties" in node:
        value = node.pop("unevaluatedProperties")
        node.setdefault("additionalProperties", value)
    if "unevaluatedItems" in node and "contains" not in node:
        value = node.pop("unevaluatedItems")
        node.setdefault("items", value)


# Calendar-exact RFC 3339 dates (leap years included; year 0000 excluded, as Python's
# ``date.fromisoformat`` and so jsonschema's ``date`` checker do). xgrammar's own ``format``
# grammar lets 2024-02-30 through; this regex is exact for ``date`` and, for ``date-time``,
# a subset of RFC 3339 (upper-case T and Z, no leap second): never looser.
_YEAR = r"(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MONTH_DAY = (r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
              r"|02-(?:0[1-9]|1[0-9]|2[0-8]))")
DATE_REGEX = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
DATE_TIME_REGEX = rf"{DATE_REGEX}T{_TIME}"
_FORMAT_PATTERNS = {"date": DATE_REGEX, "date-time": DATE_TIME_REGEX}


def _exact_dates(node: JsonObject) -> None:
    """``format: date`` / ``date-time`` on a declared string, without its own pattern: the
    calendar-exact pattern instead (the grammar's format rule does not check the day)."""
    fmt = node.get("format")
    if isinstance(fmt, str) and fmt in _FORMAT_PATTERNS and node.get("type") == "string" and "pattern" not in node:
        node.pop("format")
        node["pattern"] = "^" + _FORMAT_PATTERNS[fmt] + "$"


def normalize_schema(schema: JsonObject, *, declare_names: bool = True) -> JsonObject:
    """A copy with the same valid instances, rewritten so more of it is enforced exactly.

    First the exact rewrites of ``schema_rewrite`` (``not``, ``dependencies``, array-form
    ``items``, annotation formats, disjoint ``oneOf``). Then (each checked with the matcher by
    ``evals/schema_keywords.py --normalize``):
    annotations dropped; fractional bounds on integers rounded inwards (they do not compile);
    required names missing from ``properties`` declared there (else not enforced); enum
    values violating sibling keywords removed (siblings of enum are ignored); and
    ``unevaluatedProperties`` / ``unevaluatedItems`` without applicators turned into
    ``additionalProperties`` / ``items`` (the same meaning there; the former are ignored);
    ``format: date`` / ``date-time`` on strings turned into calendar-exact patterns.
    ``declare_names`` False leaves required names undeclared (llguidance's form: it writes them as
    other properties, and a name declared in a branch would fix that branch's property order).
    """
    out = rewrite_schema(schema)  # a copy: not / dependencies / array items / formats / oneOf, exactly
    if not isinstance(out, dict):  # rewritten to ``false``: nothing valid; let the backends say so
        out = copy.deepcopy(schema)
    else:
        out.pop("$schema", None)  # the rewritten schema reads as 2020-12 (draft 4 bounds, array items, ...)
    for node in list(walk_schemas(out)):
        for k in _DROPPABLE & node.keys():
            node.pop(k)
        if node.get("uniqueItems") is False:
            node.pop("uniqueItems")
        if "if" in node and "then" not in node and "else" not in node:
            node.pop("if")
        if "if" not in node:
            node.pop("then", None)
            node.pop("else", None)
        _round_integer_bounds(node)
        _unevaluated_to_additional(node)
        if declare_names:
            declare_required(node)
        _filter_enum(node)
        _exact_dates(node)
    return out
