"""Turn a request's response_format / structured_outputs / tools into one XGrammar constraint.

Fail closed: anything that cannot be enforced exactly as asked raises ``ConstraintError``
(the HTTP layer turns it into a 400 ``invalid_request_error``), never an unconstrained
generation. Every schema, regex and grammar is checked here with the same xgrammar calls that
vLLM's ``validate_xgrammar_grammar`` makes, so what we return is what vLLM accepts.

Tool calls are enforced with an xgrammar 0.2 structural tag built from the parser's format
data (``tool_parsers.base.CallFormat``): the tool name is a constant string and the arguments
follow the tool's ``parameters`` schema. After the last call only end-of-turn is allowed.

Decisions:
* ``response_format`` json (or ``structured_outputs``) together with ``tool_choice`` "required" or
  a named tool: the turn is a tool call, so the calls are the constraint (as OpenAI does: the
  format governs text turns, and a forced call is not one). With ``tool_choice`` "auto" the
  output is either the tool calls or the JSON answer.
* A named ``tool_choice`` yields exactly one call of that tool (``parallel_tool_calls`` ignored).
* ``tool_choice`` "none" adds no constraint (the tools are not rendered).
* A json schema that vLLM's xgrammar path refuses outright (vLLM's
  ``has_xgrammar_unsupported_json_features``: multipleOf, uniqueItems, multi-branch allOf, ...)
  is sent as a structural tag instead, which vLLM does not pre-screen; whether such a loosely
  enforced schema is acceptable is decided by the caller (``server.schema_support``).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, cast

from reasoning_parsers.base import thinking_on
from server.config import MAX_SCHEMA_DEPTH
from server.engine.budget_plan import BUDGET_PREFIX
from server.json_types import JsonMapping, JsonObject, JsonValue, nesting_exceeds
from server.lru import BoundedLRU
from server.structured.errors import GRAMMAR_ERRORS, ConstraintError, grammar_error_message
from server.structured.tool_grammar import (
    EMPTY_OBJECT,
    const,
    framed_answer,
    json_format,
    one_of,
    resolve_format,
    seq,
    tool_call_format,
)
from server.structured.tools import Tool, ToolSpec
from server.structured.vllm_limits import vllm_json_refusal

if TYPE_CHECKING:  # pragma: no cover
    from tool_parsers.base import CallFormat

__all__ = [
    "JSON_OBJECT",
    "check_schema",
    "Constraint",
    "ConstraintError",
    "ReasoningSpec",
    "constraint_from_request",
    "tool_call_format",
    "vllm_json_refusal",
]

ConstraintKind = Literal["json", "json_object", "regex", "choice", "grammar", "structural_tag"]
Backend = Literal["xgrammar", "llguidance"]

# vLLM's limit (vllm.sampling_params), the ceiling of --max-schema-depth: one constant for both.
MAX_JSON_NESTING = MAX_SCHEMA_DEPTH
STRUCTURAL_TAG_WRAPPER_NESTING = 16

# Whitespace a model typically writes between ``</think>`` and the constrained answer.
_AFTER_REASONING_WS = r"[ \t\r\n]{0,8}"
_VLLM_OPTION_KEYS = frozenset({"disable_any_whitespace", "disable_additional_properties", "whitespace_pattern"})


@dataclass(frozen=True)
class ReasoningSpec:
    """A reasoning block the model may write before the constrained part.

    ``starts_open``: the prompt already ends with ``start`` (the output begins inside the block),
    so the block is mandatory. ``required``: the block must appear even if not pre-opened.
    """

    start: str = "<think>"
    end: str = "</think>"
    starts_open: bool = False
    required: bool = False
    switches: tuple[str, ...] = ("enable_thinking",)  # chat_template_kwargs turning thinking on/off,
    thinking_default: bool = True  # and whether it is on when none is set (the parser's own rule)

    def thinks(self, chat_template_kwargs: JsonMapping | None, reasoning_effort: str | None) -> bool:
        return thinking_on(chat_template_kwargs, reasoning_effort, switches=self.switches,
                           default=self.thinking_default)


@dataclass(frozen=True)
class Constraint:
    """Engine-neutral constraint. ``value`` per kind: json → schema (dict or bool),
    json_object → True, regex/grammar → str, choice → tuple[str, ...],
    structural_tag → ``{"type": "structural_tag", "format": {...}}`` dict."""

    kind: ConstraintKind
    value: JsonValue | tuple[str, ...]
    #: The compiler that enforces it: "xgrammar", or "llguidance" for a JSON schema that only
    #: llguidance enforces exactly (``schema_plan.decide_schema``; the engine's hybrid backend).
    backend: Backend = "xgrammar"
    #: Budget-aware closing (``server/structured/budget.py``): the engine ends the answer validly
    #: within ``max_tokens``; ``closers`` are the texts that may end its free text.
    closes: bool = False
    closers: tuple[str, ...] = ()

    #: The value as compact JSON (key order kept: property order is part of the grammar).
    text: str = field(init=False, repr=False, compare=False)
    #: Backend, kind + :attr:`text`: the compiled-grammar cache's key. Keys are NOT sorted
    #: (xgrammar emits properties in schema order).
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Made once with the value (a constraint is never changed after it is made): an agent's
        # remembered constraint is looked up again on every turn, and every reader takes the field.
        text = json.dumps(self.value, separators=(",", ":"), ensure_ascii=False)
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "key", ("" if self.backend == "xgrammar" else self.backend + "/") + self.kind + ":" + text)


#: Any JSON object (``response_format: json_object``); one value, made with the module.
JSON_OBJECT = Constraint("json_object", True)


def _reasoning_prefix(spec: ReasoningSpec) -> JsonObject:
    """Free text up to ``spec.end`` (optional unless pre-opened or required), then whitespace."""
    block: JsonObject = {
        "type": "tag",
        "begin": "" if spec.starts_open else spec.start,
        "content": {"type": "any_text"},
        "end": spec.end,
    }
    if not (spec.starts_open or spec.required):
        block = {"type": "optional", "content": block}
    return seq(block, {"type": "regex", "pattern": _AFTER_REASONING_WS})


# ---------------------------------------------------------------------------------------------
# Validation helpers (same xgrammar entry points vLLM uses; no tokenizer needed).


_UNSEEN = object()
# kind + canonical JSON -> problem (None: fine). Keys are client schemas (each up to
# --max-schema-bytes): bounded in their size too.
_CHECKS: BoundedLRU[str, str | None] = BoundedLRU(max_entries=1024, max_chars=32 << 20)


def _remembered_problem(kind: str, doc: JsonValue, find: Callable[[], str | None]) -> str | None:
    """``find()``'s outcome for ``doc``, remembered: agents send the same tools on every turn,
    and checking them costs milliseconds per schema."""
    key = kind + json.dumps(doc, sort_keys=True, separators=(",", ":"))
    found = _CHECKS.get(key, _UNSEEN)  # type: ignore[arg-type]
    if found is not _UNSEEN:
        return found
    problem = find()
    _CHECKS.put(key, problem)
    return problem


def check_schema(schema: JsonValue, param: str) -> None:
    """JSON Schema 2020-12 meta-validation and the nesting limit (which compiler takes the
    schema is ``schema_plan.decide_schema``'s question; a tool's schema is compiled in its tag)."""
    if isinstance(schema, bool):
        if not schema:
            raise ConstraintError(f"{param}: the schema `false` accepts no value at all.", param, code="invalid_schema")
        return
    if not isinstance(schema, dict):
        raise ConstraintError(f"{param} must be a JSON Schema object, got {type(schema).__name__}.", param,
                              code="invalid_schema")
    problem = _remembered_problem("schema:", schema, lambda: _schema_problem(schema))
    if problem is not None:
        raise ConstraintError(f"{param} {problem}", param, code="invalid_schema")


def _schema_problem(schema: JsonObject) -> str | None:
    """What is wrong with ``schema`` (the text after the parameter name), or None."""
    import jsonschema

    # Against the meta-schema of the draft ``$schema`` names, 4 to 2020-12 (2020-12 when none; draft 3
    # keywords mean other things, so such a schema is checked as 2020-12).
    meta = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    if meta is jsonschema.Draft3Validator:
        meta = jsonschema.Draft202012Validator
    try:
        meta.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/" + "/".join(str(p) for p in exc.path)
        return f"is not a valid JSON Schema at {where}: {exc.message}"
    if nesting_exceeds(schema, MAX_JSON_NESTING):
        return f"is nested too deeply: objects and arrays may nest at most {MAX_JSON_NESTING} levels."
    return None  # whether a compiler takes it is schema_plan.decide_schema's question


def _check_regex(pattern: JsonValue, param: str) -> str:
    """``pattern``, checked as vLLM will compile it."""
    import xgrammar as xgr

    if not isinstance(pattern, str):
        raise ConstraintError(f"{param} must be a string.", param)
    if "\x00" in pattern:
        raise ConstraintError(f"{param} must not contain a NUL character.", param)
    try:
        xgr.Grammar.from_regex(pattern)
    except GRAMMAR_ERRORS as exc:
        raise ConstraintError(f"{param} is not a supported regex: {grammar_error_message(exc)}", param) from None
    return pattern


def _is_lark(grammar: str) -> bool:
    """vLLM's ``grammar_is_likely_lark``: no ``::=`` on any non-comment line."""
    for line in grammar.split("\n"):
        line = re.sub(r"(#|//).*$", "", line).strip()
        if line and "::=" in line:
            return False
    return True


def _check_grammar(grammar: JsonValue, param: str) -> str:
    """Parse as vLLM will (Lark or EBNF); returns the grammar as EBNF."""
    import xgrammar as xgr

    if not isinstance(grammar, str) or not grammar.strip():
        raise ConstraintError(f"{param} must be a non-empty grammar string.", param)
    if grammar.lstrip().startswith("%llguidance"):  # the engine's marker for a schema sent to llguidance
        raise ConstraintError(f"{param}: llguidance grammars are not accepted; send a Lark or EBNF grammar.", param)
    if grammar.lstrip().startswith(BUDGET_PREFIX.strip()):  # the engine's marker for a budget header
        raise ConstraintError(f"{param}: a grammar may not start with {BUDGET_PREFIX.strip()!r}; send a Lark or "
                              "EBNF grammar (ask for budget-aware closing with close_within_budget).", param)
    lark = _is_lark(grammar)
    try:
        parsed = xgr.Grammar.from_lark(grammar) if lark else xgr.Grammar.from_ebnf(grammar)
    except GRAMMAR_ERRORS as exc:
        kind = "Lark" if lark else "EBNF (GBNF)"
        raise ConstraintError(f"{param} has a {kind} syntax error: {grammar_error_message(exc)}", param) from None
    return str(parsed) if lark else grammar


def _check_choice(choice: JsonValue, param: str) -> tuple[str, ...]:
    if not isinstance(choice, list) or not choice:
        raise ConstraintError(f"{param} must be a non-empty list of strings.", param)
    texts = tuple(c for c in choice if isinstance(c, str))
    if len(texts) != len(choice):
        raise ConstraintError(f"{param} must contain only strings.", param)
    return texts


def _check_structural_tag(tag: JsonObject, param: str | None) -> None:
    def find() -> str | None:
        import xgrammar as xgr

        if nesting_exceeds(tag, MAX_JSON_NESTING + STRUCTURAL_TAG_WRAPPER_NESTING):
            return f"The constraint is nested too deeply (schemas may nest at most {MAX_JSON_NESTING} levels)."
        try:
            xgr.Grammar.from_structural_tag(json.dumps(tag))
        except GRAMMAR_ERRORS as exc:
            return f"The constraint cannot be compiled: {grammar_error_message(exc)}"
        return None

    problem = _remembered_problem("tag:", tag, find)
    if problem is not None:
        raise ConstraintError(problem, param)


# ---------------------------------------------------------------------------------------------
# Request → Constraint


@dataclass(frozen=True)
class _Response:
    """The text-answer constraint: a structural-tag format plus the plain vLLM form."""

    fmt: JsonObject
    plain: Constraint | None  # None when only expressible as a structural tag


def _from_response_format(rf: JsonMapping, guidance: JsonObject | None = None) -> _Response | None:
    kind = rf.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return _Response(json_format({"type": "object"}), JSON_OBJECT)
    if kind != "json_schema":
        raise ConstraintError(
            f"response_format.type {kind!r} is not supported; use 'text', 'json_object' or 'json_schema'.",
            "response_format.type",
        )
    spec = rf.get("json_schema")
    if not isinstance(spec, dict):
        raise ConstraintError("response_format.json_schema must be an object with a 'schema'.", "response_format.json_schema")
    schema = spec.get("schema", {"type": "object"})
    check_schema(schema, "response_format.json_schema.schema")
    return _json_response(schema, guidance)


def _json_response(schema: JsonValue, guidance: JsonObject | None = None,
                   param: str = "response_format.json_schema.schema") -> _Response:
    """``guidance``: the schema's llguidance form when llguidance enforces it exactly (then
    the plain constraint runs there); a structural tag always holds ``schema`` (XGrammar's form)."""
    if schema is True:  # "any JSON value", in the dict form every consumer understands
        schema = {}
    if guidance is not None:
        plain: Constraint | None = Constraint("json", guidance, backend="llguidance")
    else:
        _check_xgrammar_schema(schema, param)
        plain = None if vllm_json_refusal(schema) else Constraint("json", schema)
    return _Response(json_format(schema), plain)


def _check_xgrammar_schema(schema: JsonValue, param: str) -> None:
    """XGrammar converts ``schema`` (it will hold the answer), remembered per schema."""
    def find() -> str | None:
        import xgrammar as xgr

        try:
            xgr.Grammar.from_json_schema(json.dumps(schema))
        except GRAMMAR_ERRORS as exc:
            return f"cannot be compiled to a grammar: {grammar_error_message(exc)}"
        return None

    problem = _remembered_problem("xgr:", schema, find)
    if problem is not None:
        raise ConstraintError(f"{param} {problem}", param, code="invalid_schema")


def _from_structured_outputs(so: JsonMapping, guidance: JsonObject | None = None) -> _Response:
    keys = [k for k, v in so.items() if v is not None and k not in _VLLM_OPTION_KEYS]
    known = {"json", "regex", "choice", "grammar", "json_object"}
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise ConstraintError(
            f"structured_outputs.{unknown[0]} is not supported; use one of json, regex, choice, grammar, json_object.",
            f"structured_outputs.{unknown[0]}",
        )
    if len(keys) != 1:
        raise ConstraintError(
            f"structured_outputs must set exactly one of json, regex, choice, grammar, json_object (got {len(keys)}).",
            "structured_outputs",
        )
    key = keys[0]
    value = so[key]
    param = f"structured_outputs.{key}"
    if key == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ConstraintError(f"{param} is not valid JSON: {exc}", param) from None
        check_schema(value, param)
        return _json_response(value, guidance, param)
    if key == "json_object":
        if value is not True:
            raise ConstraintError(f"{param} must be true when set.", param)
        return _Response(json_format({"type": "object"}), JSON_OBJECT)
    if key == "regex":
        pattern = _check_regex(value, param)
        return _Response({"type": "regex", "pattern": pattern}, Constraint("regex", pattern))
    if key == "choice":
        choices = _check_choice(value, param)
        return _Response(one_of([const(c) for c in choices]), Constraint("choice", choices))
    ebnf = _check_grammar(value, param)
    return _Response({"type": "grammar", "grammar": ebnf}, Constraint("grammar", value))




def _tool_arguments_schema(params: JsonValue, param: str) -> JsonObject | None:
    """The object schema the arguments must follow as sent (checked), or None for a parameterless
    tool (exactly ``{}``)."""
    if params is None or params == {} or (
        isinstance(params, dict)
        and params.get("type") == "object"
        and params.get("properties", None) == {}
        and set(params) <= {"type", "properties", "required", "additionalProperties", "title", "description"}
        and not params.get("required")
        and params.get("additionalProperties", False) is False
    ):
        return None
    check_schema(params, param)
    if not isinstance(params, dict):  # `true`: any JSON, but arguments are always an object
        return {"type": "object"}
    t = params.get("type")
    if t is None:
        return {"type": "object", **params}
    if t != "object" and not (isinstance(t, list) and "object" in t):
        raise ConstraintError(f"{param} must describe an object (type 'object'), got type {t!r}.", param)
    return {**params, "type": "object"} if isinstance(t, list) else params


def _tool_entries(tools: ToolSpec) -> list[tuple[str, JsonValue]]:
    """(name, arguments schema) of each tool the model may call; every tool's schema is checked
    (one left out by ``allowed_tools`` is still rendered in the prompt). Each schema is then
    rewritten exactly (``schema_plan.tool_schemas``, all in one call: see
    tests/unit/test_request_path.py); a ``strict`` tool's must be one XGrammar enforces exactly
    (else a 400, as a strict response format), another is enforced as far as XGrammar goes and its
    calls are checked afterwards."""
    from server.structured.schema_plan import tool_schemas

    sent: list[tuple[Tool, JsonObject]] = []
    schemas: dict[str, JsonValue] = {}
    for t in tools.tools:  # (loops, not comprehensions: no call back into this module after tool_schemas)
        params = _tool_arguments_schema(t.parameters, f"tools[{t.index}].function.parameters")
        if params is None:
            schemas[t.name] = cast(JsonObject, EMPTY_OBJECT)  # JSON: tool_grammar's literal infers as dict[str, object]
        else:
            sent.append((t, params))
    for (t, _), (form, problems) in zip(sent, tool_schemas([(p, t.strict) for t, p in sent]), strict=True):
        if problems:
            param = f"tools[{t.index}].function.parameters"
            listed = "; ".join(p.message() for p in problems)
            raise ConstraintError(
                f"{param}: the strict tool {t.name!r} has a schema the tool-call grammar cannot enforce exactly "
                f"(XGrammar writes every call): {listed}. Remove or rewrite these keywords, or set the tool's "
                "strict to false to have its arguments validated after generation.", param, code="unsupported_schema")
        schemas[t.name] = form
    entries: list[tuple[str, JsonValue]] = []
    for t in tools.callable:
        entries.append((t.name, schemas[t.name]))
    return entries


def _finish(fmt: JsonObject, reasoning: ReasoningSpec | None, plain: Constraint | None) -> Constraint:
    """Prefix the reasoning block when asked, validate, and pick the simplest vLLM form."""
    if reasoning is None and plain is not None:
        return plain
    if reasoning is not None:
        fmt = seq(_reasoning_prefix(reasoning), fmt)
    tag: JsonObject = {"type": "structural_tag", "format": fmt}
    _check_structural_tag(tag, None)
    return Constraint("structural_tag", tag)


def constraint_from_request(
    *,
    response_format: JsonMapping | None,
    structured_outputs: JsonMapping | None,
    tools: ToolSpec | None = None,
    tool_format: str | CallFormat | None = None,
    reasoning: ReasoningSpec | None = None,
    tool_constraints: bool = True,
    guidance_schema: JsonObject | None = None,
) -> Constraint | None:
    """One constraint for the whole completion, or None when the output is free text.

    ``tool_constraints`` False leaves tool_choice "auto" unconstrained (required / named calls
    are still enforced). ``guidance_schema``: the JSON answer's schema in llguidance's form, when
    llguidance enforces it exactly (used where the answer is the whole output). Raises
    ConstraintError for anything that cannot be enforced exactly.
    """
    response: _Response | None = None
    if response_format is not None:
        response = _from_response_format(response_format, guidance_schema)
    if structured_outputs:
        if response is not None:
            raise ConstraintError(
                "Set either response_format or structured_outputs, not both.", "structured_outputs"
            )
        response = _from_structured_outputs(structured_outputs, guidance_schema)

    mode = "none" if tools is None else tools.mode
    if mode == "none":
        if response is None:
            return None
        framed = framed_answer(tool_format, response.fmt)  # Harmony: the answer is the final message's body
        return _finish(framed or response.fmt, reasoning, None if framed else response.plain)
    assert tools is not None  # a mode other than "none" comes from tools
    entries = _tool_entries(tools)
    if mode == "auto" and not tool_constraints:
        return None
    fmt_spec = resolve_format(tool_format)
    if mode == "named":
        calls = tool_call_format(fmt_spec, entries, mode="required", parallel=False)
        return _finish(calls, reasoning, None)
    if mode == "required":
        return _finish(tool_call_format(fmt_spec, entries, mode="required", parallel=tools.parallel), reasoning, None)
    if response is None:
        return _finish(tool_call_format(fmt_spec, entries, mode="auto", parallel=tools.parallel), reasoning, None)
    # auto + JSON answer: either the calls (no free text) or the constrained answer.
    calls = tool_call_format(fmt_spec, entries, mode="required", parallel=tools.parallel)
    answer = fmt_spec.answer(response.fmt) or response.fmt
    return _finish({"type": "or", "elements": [calls, answer]}, reasoning, None)
