"""The schema diagnostics report (``POST /v1/schemas/check``, ``gramserve check-schema``).

For a JSON Schema or a tools list: does it compile, how is each keyword enforced (exact /
loose / rejected per JSON pointer), would ``strict`` accept it, how long did it compile,
and was it already cached.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NotRequired, Protocol, TypedDict

from pydantic import ValidationError

from server.config import Settings
from server.errors import APIError, validation_error
from server.json_types import JsonValue
from server.lru import BoundedLRU
from server.protocol import ChatCompletionRequest
from server.structured.constraints import Constraint, ConstraintError, check_schema
from server.structured.from_request import BuiltConstraint, checked, schema_limits, schema_request
from server.structured.schema_plan import Backend, DecisionReport, ProblemReport, SchemaDecision, decide_schema
from server.structured.spec import Capabilities, constraint_spec

if TYPE_CHECKING:  # pragma: no cover
    from server.structured.grammar_cache import CompileResult

__all__ = ["CheckedSchema", "ConstraintCompiler", "KeywordReport", "SchemaCheckReport", "body_request",
           "check_schema_report", "offline_capabilities", "split_body"]


class ConstraintCompiler(Protocol):
    """What the report compiles with: a :class:`~server.structured.grammar_cache.GrammarCache`."""

    def compile(self, constraint: Constraint) -> CompileResult: ...


class _Compiled(TypedDict):
    compiles: bool
    error: str | None
    compile_seconds: float | None
    cached: bool


class KeywordReport(TypedDict):
    """One keyword use (:class:`~server.structured.schema_support.KeywordUse`) as reported."""

    pointer: str
    keyword: str
    level: str
    note: str


class CheckedSchema(_Compiled):
    """One schema of the report: how its request compiled, and the verdict on the schema itself
    (:class:`~server.structured.schema_plan.DecisionReport`, its problems as text)."""

    name: str
    backend: Backend | None
    exact: bool
    tried: list[Backend]
    problems: list[str]
    stricter: NotRequired[list[ProblemReport]]
    strict_ok: bool
    problem_details: list[ProblemReport]
    keywords: list[KeywordReport]


class SchemaCheckReport(TypedDict):
    """``POST /v1/schemas/check``'s answer."""

    ok: bool
    items: list[CheckedSchema]


#: The keys of a response format's ``json_schema`` object: a body of only these is that object, whatever its schema.
_WRAPPER_KEYS = frozenset({"schema", "name", "strict", "description"})


def split_body(body: JsonValue) -> list[tuple[str, JsonValue]]:
    """(label, schema) pairs: one schema, or each tool's parameters."""
    tools = body if isinstance(body, list) else body.get("tools") if isinstance(body, dict) else None
    if isinstance(body, dict) and "schema" in body and "tools" not in body and (
            isinstance(body["schema"], dict) or body.keys() <= _WRAPPER_KEYS):
        # (``{"schema": true}`` is that schema, which a request refuses, not an object with an unknown keyword)
        return [("schema", body["schema"])]
    if tools is None:
        if not isinstance(body, dict):
            raise ValueError("send a JSON Schema object, {\"schema\": ...}, or a tools list")
        return [("schema", body)]
    if not isinstance(tools, list):  # "tools": a number, an object, a string
        raise ValueError(f"'tools' must be a list of tools, not {type(tools).__name__}: "
                         "[{\"type\": \"function\", \"function\": {\"name\", \"parameters\"}}, ...]")
    out: list[tuple[str, JsonValue]] = []
    for i, t in enumerate(tools):
        fn = (t or {}).get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ValueError(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\", \"parameters\"}}}}")
        out.append((f"tools[{i}]:{fn['name']}", fn.get("parameters") or {"type": "object", "properties": {}}))
    return out


def body_request(body: JsonValue) -> ChatCompletionRequest:
    """The request a check body stands for: a schema is a non-strict ``json_schema`` response
    format, a tools list is those tools under the default ``tool_choice`` (the tool-call
    grammar a request with them compiles, not each schema alone)."""
    items = split_body(body)
    if items[0][0] == "schema":
        return schema_request(items[0][1])
    # split_body took it as tools: the list itself, or an object's "tools"
    tools = body if isinstance(body, list) else body["tools"] if isinstance(body, dict) else None
    return ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "-"}], "tools": tools})


def offline_capabilities(tool_parser: str = "hermes") -> Capabilities:
    """What a default server enforces, without a model (``gramserve check-schema``): default
    Settings, the default model's tool-call family, no reasoning parser."""
    from tool_parsers import get_tool_parser

    return Capabilities.of(Settings(), tool_parser=get_tool_parser(tool_parser))


def check_schema_report(body: JsonValue, *, cache: ConstraintCompiler, caps: Capabilities | None = None,
                        memo: BoundedLRU[str, BuiltConstraint] | None = None) -> SchemaCheckReport:
    """The report for every schema in ``body``; ``cache`` is a GrammarCache (compiles and counts).
    The body's request is built into its spec and constraint exactly as a request builds it on
    a server with ``caps`` (and ``memo``: the server passes its own, so a check warms the entry
    the request then hits)."""
    labelled = split_body(body)
    if not labelled:  # an empty tools list: nothing to check
        return {"ok": True, "items": []}
    try:
        built = checked(constraint_spec(body_request(body), caps or offline_capabilities()), memo=memo, cache=None)
        if built.constraint is None:
            compiled: _Compiled = {"compiles": True, "error": None, "compile_seconds": None, "cached": False}
        else:
            result = cache.compile(built.constraint)
            compiled = {"compiles": result.ok, "error": result.error, "compile_seconds": round(result.seconds, 6),
                        "cached": result.cached}
    except (APIError, ValidationError) as exc:  # refused before compiling, as the request would be
        error = validation_error(list(exc.errors())) if isinstance(exc, ValidationError) else exc
        compiled = {"compiles": False, "error": error.message, "compile_seconds": None, "cached": False}
    items: list[CheckedSchema] = []
    guidance = (caps or offline_capabilities()).guidance
    for label, schema in labelled:
        # The request's own verdict (schema_plan): a response format may run on either backend; a
        # tool's arguments are always part of XGrammar's structural tag.
        tool = label != "schema"
        decision = _decision(schema, guidance=guidance and not tool, caps=caps or offline_capabilities())
        verdict: DecisionReport = (decision.report() if decision
                                   else {"backend": None, "exact": False, "tried": [], "problems": []})
        items.append({
            "name": label,
            **compiled,
            **verdict,
            "strict_ok": bool(compiled["compiles"] and verdict["exact"]),
            "problems": [_problem_text(p) for p in verdict["problems"]],
            "problem_details": verdict["problems"],
            "keywords": [{"pointer": e.pointer or "/", "keyword": e.keyword, "level": e.level, "note": e.note}
                         for e in (decision.keywords if decision else ())],
        })
    return {"ok": all(i["strict_ok"] for i in items), "items": items}


def _decision(schema: JsonValue, *, guidance: bool, caps: Capabilities) -> SchemaDecision | None:
    """``decide_schema`` for a schema within the server's caps that passes the meta-schema (None:
    it does not, and the request is refused before any decision, as ``compiled`` says)."""
    if not isinstance(schema, dict):
        return None
    try:
        schema_limits(caps.limits, schema, param="schema")
        check_schema(schema, "schema")
    except (ConstraintError, APIError):
        return None
    return decide_schema(schema, guidance=guidance)


def _problem_text(p: ProblemReport) -> str:
    return f"{p['keyword']} at {p['pointer']} ({p['backend']}: {p['note']})"
