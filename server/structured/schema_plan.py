"""The one analysis of a JSON Schema: which compiler enforces it exactly, or why none does.

Every path that judges a schema asks :func:`decide_schema`: a request's ``response_format`` /
``structured_outputs.json`` (``from_request.build``), ``POST /v1/schemas/check``,
``gramserve check-schema`` and ``--precompile``. So the check says exactly what a request will
do: the same verdict, keyword list and JSON pointers.

The rule, in order (measured on MaskBench, docs/schema_support.md):

1. the schema is rewritten without changing its valid instances (``normalize_schema``);
2. **XGrammar** (the engine's own backend, and the one that joins thinking and tool calls in
   one structural tag) when ``schema_support.analyze_schema`` finds every keyword exact there;
3. else **llguidance** when it compiles the schema with no error and no warning: its JSON Schema
   converter either enforces a keyword exactly or refuses it (``Unimplemented keys``), and no
   invalid instance got through it on the JSON-Schema-Test-Suite or MaskBench's dev half;
4. else no compiler is exact: a strict request is refused, naming each keyword, its pointer
   and the backends tried; a non-strict one runs on XGrammar and is validated afterwards.

Undeclared properties stay writable where the schema allows them (JSON Schema's rule: no
``additionalProperties`` means any): llguidance does this by default, and the XGrammar form
spells ``additionalProperties: true`` out, since XGrammar's ``strict_mode`` would forbid them.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Literal, NotRequired, TypedDict

from server.json_types import JsonMapping, JsonObject, JsonValue
from server.lru import BoundedLRU
from server.structured.errors import GRAMMAR_ERRORS, grammar_error_message
from server.structured.schema_support import KeywordUse, analyze_schema, normalize_schema

__all__ = ["BACKENDS", "Backend", "DecisionReport", "Problem", "ProblemReport", "SchemaDecision", "decide_schema",
           "tool_schema", "tool_schemas", "xgrammar_form"]

Backend = Literal["llguidance", "xgrammar"]
BACKENDS: tuple[Backend, ...] = ("xgrammar", "llguidance")  # tried in this order


class ProblemReport(TypedDict):
    """A :class:`Problem` as the schema check reports it."""

    backend: Backend
    keyword: str
    pointer: str
    note: str


class DecisionReport(TypedDict):
    """A :class:`SchemaDecision` as the schema check reports it (no ``stricter`` without a decision)."""

    backend: Backend | None
    exact: bool
    tried: list[Backend]
    problems: list[ProblemReport]
    stricter: NotRequired[list[ProblemReport]]


@dataclass(frozen=True)
class Problem:
    """Why one backend cannot enforce one keyword at one place exactly."""

    backend: Backend
    keyword: str
    pointer: str
    note: str

    def message(self) -> str:
        return f"{self.keyword} at {self.pointer or '/'} ({self.backend}: {self.note})"

    def as_dict(self) -> ProblemReport:
        return {"backend": self.backend, "keyword": self.keyword, "pointer": self.pointer or "/", "note": self.note}


@dataclass(frozen=True)
class SchemaDecision:
    """The verdict on one schema, for both backends. ``backend`` is the first exact one (None:
    neither is); ``llguidance_schema`` / ``xgrammar_schema`` are what each compiler is given."""

    backend: Backend | None
    llguidance_schema: JsonObject
    xgrammar_schema: JsonObject
    llguidance_problems: tuple[Problem, ...] = ()
    xgrammar_problems: tuple[Problem, ...] = ()
    keywords: tuple[KeywordUse, ...] = field(default=(), compare=False)  # XGrammar's per-keyword report
    xgrammar_stricter: tuple[Problem, ...] = ()  # valid documents XGrammar's grammar cannot write
    llguidance_stricter: tuple[Problem, ...] = ()  # valid documents llguidance's grammar cannot write

    @property
    def exact(self) -> bool:
        return self.backend is not None

    @property
    def xgrammar_exact(self) -> bool:
        return not self.xgrammar_problems

    @property
    def xgrammar_compiles(self) -> bool:
        return not any(p.keyword == "schema" for p in self.xgrammar_problems)

    @property
    def tried(self) -> tuple[Backend, ...]:
        if self.backend == "xgrammar" and self.xgrammar_stricter:
            return BACKENDS  # llguidance was tried first (XGrammar's grammar is stricter here)
        return BACKENDS if self.backend is None else BACKENDS[:BACKENDS.index(self.backend) + 1]

    def problems_of(self, backend: Backend) -> tuple[Problem, ...]:
        return self.xgrammar_problems if backend == "xgrammar" else self.llguidance_problems

    @property
    def problems(self) -> tuple[Problem, ...]:
        """The problems of every backend tried and not chosen (all of them: none exact)."""
        return tuple(p for b in self.tried if b != self.backend for p in self.problems_of(b))

    def refusal(self) -> str:
        """The 400 message of a strict request: every keyword, pointer and backend tried."""
        listed = "; ".join(p.message() for p in self.problems)
        return (f"This schema cannot be enforced exactly by any grammar backend (tried {', '.join(self.tried)}): "
                f"{listed}. Remove or rewrite these keywords, or set strict to false to have the output "
                "validated after generation.")

    @property
    def stricter(self) -> tuple[Problem, ...]:
        """Where the chosen grammar is stricter than the schema (every output valid, some valid documents
        not writable): chosen where no backend is both exact and complete."""
        return self.xgrammar_stricter if self.backend == "xgrammar" else self.llguidance_stricter

    def report(self) -> DecisionReport:
        """The JSON form the schema check returns."""
        return {"backend": self.backend, "exact": self.exact, "tried": list(self.tried),
                "problems": [p.as_dict() for p in self.problems], "stricter": [p.as_dict() for p in self.stricter]}


_MEMO: BoundedLRU[str, SchemaDecision] = BoundedLRU(max_entries=1024, max_chars=32 << 20)


def decide_schema(schema: JsonObject, *, guidance: bool = True) -> SchemaDecision:
    """The decision for ``schema`` (a dict, already meta-validated). ``guidance`` False: the
    engine has no llguidance (only XGrammar is tried). Remembered per process (bounded)."""
    key = ("g" if guidance else "x") + json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    found = _MEMO.get(key)
    if found is None:
        found = _decide(schema, guidance=guidance)
        _MEMO.put(key, found)
    return found


def _decide(schema: JsonObject, *, guidance: bool) -> SchemaDecision:
    normal = normalize_schema(schema, declare_names=False)
    x_schema = xgrammar_form(copy.deepcopy(normal))
    report = analyze_schema(x_schema, strict_mode=True)
    xg = [Problem("xgrammar", e.keyword, e.pointer, e.note or e.level.lower()) for e in report.entries
          if e.level in ("LOOSE", "REJECTED")]
    conversion = _xgrammar_conversion_problem(x_schema)
    if conversion:
        xg.append(Problem("xgrammar", "schema", "", conversion))
    stricter = _xgrammar_incomplete(x_schema) if not xg else []
    if not xg and not stricter:  # XGrammar is exact and complete: llguidance is not asked
        return SchemaDecision("xgrammar", normal, x_schema, (), (), tuple(report.entries))
    ll = (_llguidance_problems(normal, report.entries) if guidance
          else [Problem("llguidance", "schema", "", "this engine runs XGrammar only")])
    ll_stricter = _llguidance_incomplete(normal) if not ll else []
    # A backend exact and complete (XGrammar first); else one exact but stricter than the schema (every
    # output still valid; some valid documents not writable), XGrammar first.
    order: list[tuple[Backend, bool]] = [("xgrammar", not xg and not stricter), ("llguidance", not ll and not ll_stricter),
                                         ("xgrammar", not xg), ("llguidance", not ll)]
    backend: Backend | None = next((b for b, ok in order if ok), None)
    return SchemaDecision(backend, normal, x_schema, tuple(ll), tuple(xg), tuple(report.entries),
                          tuple(stricter), tuple(ll_stricter))


_TOOL_MEMO: BoundedLRU[str, tuple[JsonObject, tuple[Problem, ...]]] = BoundedLRU(max_entries=1024, max_chars=32 << 20)


def tool_schema(schema: JsonObject, *, strict: bool = False) -> tuple[JsonObject, tuple[Problem, ...]]:
    """A tool's ``parameters`` as the tool-call grammar takes them (the exact rewrites of
    ``normalize_schema``: draft 4's boolean bounds, ``not``, ``dependencies``, ... which XGrammar
    would misread or refuse; an array's missing ``items`` spelled out), and, for a ``strict`` tool,
    where XGrammar, which writes every call, is not exact on them (empty: it is; as for a response
    format, a grammar stricter than the schema is not a problem; not looked at for another tool).
    Tool calls live in XGrammar's structural tag, so llguidance is no way out. Remembered per process."""
    key = ("s" if strict else "n") + json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    found = _TOOL_MEMO.get(key)
    if found is None:
        normal = _typed_arrays(normalize_schema(schema))
        problems: list[Problem] = []
        if strict:
            problems = [Problem("xgrammar", e.keyword, e.pointer, e.note or e.level.lower())
                        for e in analyze_schema(normal, strict_mode=True).entries if e.level in ("LOOSE", "REJECTED")]
            conversion = _xgrammar_conversion_problem(normal)
            if conversion:
                problems.append(Problem("xgrammar", "schema", "", conversion))
        found = (normal, tuple(problems))
        _TOOL_MEMO.put(key, found)
    return found


def tool_schemas(sent: list[tuple[JsonObject, bool]]) -> list[tuple[JsonObject, tuple[Problem, ...]]]:
    """:func:`tool_schema` of each (schema, strict) pair, in one call."""
    return [tool_schema(schema, strict=strict) for schema, strict in sent]


def _typed_arrays(schema: JsonObject) -> JsonObject:
    """``schema`` with ``items: {}`` spelled out where an array schema gives none: XGrammar (JSON
    and every XML argument style) reads an array without ``items`` as the empty array only."""
    def walk(node: JsonValue) -> JsonValue:
        if isinstance(node, list):
            return [walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        out = {k: v if k in ("enum", "const", "default", "examples") else walk(v) for k, v in node.items()}
        if _is_array_schema(out) and not ({"items", "prefixItems"} & out.keys()):
            out["items"] = {}
        return out
    typed = walk(schema)
    assert isinstance(typed, dict)
    return typed


def _xgrammar_incomplete(schema: JsonObject) -> list[Problem]:
    """Where XGrammar's grammar is stricter than ``schema`` (its form from :func:`xgrammar_form`):
    valid documents it cannot write. Measured on MaskBench's dev half: an object open to other
    properties (XGrammar writes them only after the declared ones), an unanchored ``pattern`` or
    ``patternProperties`` name (matched whole, not searched), and a length-bounded string (no escape
    inside it). A value that may be any JSON (``{}``, ``true``, untyped items) is complete there
    since its separators are fixed (``server/engine/xgrammar_json.py``: compact, as the rest)."""

    out: list[Problem] = []
    for pointer, node in _pointed(schema):
        if isinstance(node, bool) or not (node.keys() - _NO_CONSTRAINT):
            continue
        extra = node.get("additionalProperties")
        if extra is True or isinstance(extra, dict) and not (extra.keys() - _NO_CONSTRAINT):
            out.append(Problem("xgrammar", "additionalProperties", pointer,
                               "other properties may hold any value, and XGrammar writes them only after the declared ones"))
        pattern = node.get("pattern")
        if isinstance(pattern, str) and not _anchored(pattern):
            out.append(Problem("xgrammar", "pattern", pointer, "an unanchored pattern is matched whole, not searched"))
        names = node.get("patternProperties")
        if isinstance(names, dict) and not all(_anchored(p) for p in names):
            out.append(Problem("xgrammar", "patternProperties", pointer,
                               "an unanchored name pattern is matched whole, not searched"))
        bounds = [k for k in ("minLength", "maxLength") if _positive(node.get(k))]
        if bounds and _is_bounded_json_string(node):  # (0 and 0 / none: XGrammar writes "" or any string)
            out.append(Problem("xgrammar", bounds[-1], pointer,
                               "a length-bounded string cannot hold an escape (a quote, a backslash, a newline)"))
    return out


def _positive(value: JsonValue) -> bool:
    return isinstance(value, int) and value > 0


def _anchored(pattern: str) -> bool:
    return pattern.startswith("^") and pattern.endswith("$")


def _is_bounded_json_string(node: JsonObject) -> bool:
    """Whether XGrammar writes ``node`` as a length-bounded string: one character class without
    escapes (mlc-ai/xgrammar#800; ``server/engine/xgrammar_json.py``). With a ``pattern`` or a
    ``format`` XGrammar ignores the bounds (a problem of its own, LOOSE)."""
    t = node.get("type")
    return (t == "string" or isinstance(t, list) and "string" in t) and not ({"pattern", "format", "enum", "const"}
                                                                           & node.keys())


_NO_CONSTRAINT = frozenset({"$id", "$schema", "$comment", "$anchor", "title", "description", "examples", "default",
                            "deprecated", "readOnly", "writeOnly", "format"})


def _pointed(schema: JsonValue) -> list[tuple[str, bool | JsonObject]]:
    """Every subschema with its JSON pointer (``$defs`` included), iteratively."""
    from server.structured.schema_refs import escape_token
    from server.structured.schema_support import child_schemas

    out: list[tuple[str, bool | JsonObject]] = []
    stack: list[tuple[str, JsonValue]] = [("", schema)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, bool):
            out.append((where, node))
        if not isinstance(node, dict):
            continue
        out.append((where, node))
        stack.extend(child_schemas(node, where))
        for k in ("$defs", "definitions"):
            defs = node.get(k)
            if isinstance(defs, dict):
                stack.extend((f"{where}/{k}/{escape_token(n)}", sub) for n, sub in defs.items())
    return out


def xgrammar_form(schema: JsonObject) -> JsonObject:
    """``schema`` with the defaults XGrammar's ``strict_mode`` would change spelled out: an object
    schema without ``additionalProperties`` (nor ``unevaluatedProperties`` / ``patternProperties``)
    allows any other property, and an array schema without ``items`` (``prefixItems`` or not) any
    further item (XGrammar 0.2.8 writes ``{"type": "array", "maxItems": 3}`` as ``[]`` alone, and
    refuses ``minItems`` there).
    ``schema`` is normalised (a private copy): changed in place and returned."""
    from server.structured.schema_support import declare_required, walk_schemas

    for node in list(walk_schemas(schema)):  # (declaring adds properties: not while walking them)
        declare_required(node)  # (XGrammar's strict mode would forbid a required name left undeclared)
        if _is_object_schema(node) and not ({"additionalProperties", "unevaluatedProperties", "patternProperties",
                                             "$ref"} & node.keys()):
            node["additionalProperties"] = True
        if ("prefixItems" in node or _is_array_schema(node)) and not ({"items", "unevaluatedItems", "$ref"} & node.keys()):
            node["items"] = True
    return schema


def _is_array_schema(node: JsonMapping) -> bool:
    t = node.get("type")
    return t == "array" or isinstance(t, list) and "array" in t


def _is_object_schema(node: JsonMapping) -> bool:
    t = node.get("type")
    return t == "object" or (isinstance(t, list) and "object" in t) or ("properties" in node and t is None)


# --- llguidance ------------------------------------------------------------------------------

_UNIMPLEMENTED = re.compile(r'Unimplemented keys: \[([^\]]*)\]')
_NAMED = re.compile(r"\b(oneOf|allOf|anyOf|pattern|format|minLength|maxLength|multipleOf|minimum|maximum|"
                    r"exclusiveMinimum|exclusiveMaximum|minItems|maxItems|minProperties|maxProperties|enum|const|"
                    r"\$ref|required|properties|additionalProperties|patternProperties|items|prefixItems)\b")


def _llguidance_problems(schema: JsonObject, uses: list[KeywordUse]) -> list[Problem]:
    """Why llguidance is not exact on ``schema`` (empty: it is): its error, or any warning."""
    try:
        import llguidance as llg
    except ImportError:  # pragma: no cover - shipped with vLLM; without it only XGrammar is tried
        return [Problem("llguidance", "schema", "", "llguidance is not installed")]
    try:
        grammar = llg.LLMatcher.grammar_from_json_schema(
            json.dumps(schema, ensure_ascii=False), defaults={"whitespace_flexible": False})
        is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar)
    except GRAMMAR_ERRORS as exc:  # llguidance's converter reports a bad schema this way
        is_error, messages = True, [str(exc)]
    if not messages:
        return _llguidance_pattern_problems(schema)
    out: list[Problem] = []
    for text in messages[:1] if is_error else messages:
        out.extend(_locate(text.strip(), uses))
    return out


def _llguidance_incomplete(schema: JsonObject) -> list[Problem]:
    """Where llguidance's grammar is stricter than ``schema``: valid documents it cannot write. llguidance
    1.7 matches ``multipleOf`` on unsigned digits only, so no negative multiple is writable
    (guidance-ai/llguidance#222, fixed after 1.7.6): stricter wherever the bounds let a number be negative."""
    out: list[Problem] = []
    for pointer, node in _pointed(schema):
        if isinstance(node, bool) or "multipleOf" not in node:
            continue
        types = node.get("type")
        numeric = types is None or bool({"number", "integer"} & set(types if isinstance(types, list) else [types]))
        floor = [node.get(k) for k in ("minimum", "exclusiveMinimum")]
        if numeric and not any(isinstance(b, (int, float)) and not isinstance(b, bool) and b >= 0 for b in floor):
            out.append(Problem("llguidance", "multipleOf", pointer, "llguidance writes no negative multiples"))
    return out


def _llguidance_pattern_problems(schema: JsonObject) -> list[Problem]:
    """Patterns llguidance 1.7 enforces loosely: it lets a JSON escape (``\\\\``, ``\\"``) through a
    character class that excludes the backslash or the quote (``^[^\\\\]+$`` accepts ``a\\\\b``;
    measured, MaskBench's libman.json). Any pattern naming either character is left to XGrammar."""
    out = []
    for pointer, node in _pointed(schema):
        if not isinstance(node, dict):
            continue
        patterns = [("pattern", node.get("pattern"))]
        named = node.get("patternProperties")  # an object of patterns (anything where no meta-schema checked it)
        patterns += [("patternProperties", k) for k in named] if isinstance(named, dict) else []
        for keyword, pattern in patterns:
            if isinstance(pattern, str) and ("\\\\" in pattern or '"' in pattern):
                out.append(Problem("llguidance", keyword, pointer,
                                   "a pattern that names the backslash or the quote lets JSON escapes of them through"))
    return out


def _locate(text: str, uses: list[KeywordUse]) -> list[Problem]:
    """Problems for one llguidance message, at the pointers where its keywords are used."""
    note = text.splitlines()[0][:300] if text else "refused"
    unimplemented = _UNIMPLEMENTED.search(text)
    if unimplemented:
        keywords = [k.strip().strip('"') for k in unimplemented.group(1).split(",") if k.strip()]
    else:
        keywords = list(dict.fromkeys(_NAMED.findall(text)))[:1]
    found = [Problem("llguidance", u.keyword, u.pointer, note) for u in uses if u.keyword in keywords]
    if found:
        return found
    return [Problem("llguidance", keywords[0] if keywords else "schema", "", note)]


def _xgrammar_conversion_problem(schema: JsonObject) -> str | None:
    """XGrammar's own refusal to convert ``schema`` (e.g. a construct it cannot compile)."""
    import xgrammar as xgr

    try:
        xgr.Grammar.from_json_schema(json.dumps(schema), strict_mode=True)
    except GRAMMAR_ERRORS as exc:
        return f"cannot be compiled: {grammar_error_message(exc)}"
    return None
