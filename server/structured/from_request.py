"""Build a :class:`~server.structured.spec.ConstraintSpec` into its checked constraint, once.

Fail closed: a constraint that cannot be applied exactly as asked is a 400 naming the
problem, never 200 with unconstrained text. Under ``strict`` (and for
``structured_outputs.json``), a schema using keywords the grammar enforces only loosely is
rejected; without ``strict`` it is served and validated afterwards. :func:`build` is pure (the
spec in, the constraint out); :func:`checked` adds the one memo, keyed on the spec, and the
compile, so requests, the schema check and ``--precompile`` share both.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from server import metrics
from server.errors import bad_request
from server.json_types import nesting_exceeds
from server.loop_budget import may_block
from server.lru import BoundedLRU
from server.protocol import ChatCompletionRequest
from server.state import ServerState
from server.structured.constraints import Constraint, check_schema, constraint_from_request
from server.structured.schema_plan import SchemaDecision, decide_schema
from server.structured.spec import ConstraintSpec, Limits, capabilities

__all__ = ["BuiltConstraint", "build", "capabilities", "checked", "compile_checked", "constraint_limits",
           "new_constraint_memo", "request_constraint", "schema_limits", "schema_request", "state_memo", "MAX_CHOICES"]

MAX_CHOICES = 1024  # a choice list is a grammar of alternatives: beyond this it is a schema's job


@dataclass(frozen=True)
class BuiltConstraint:
    """A spec's constraint (None: free text), the schema to validate the answer against
    afterwards (None: none), whether that schema was strict, and its verdict."""

    constraint: Constraint | None
    schema: dict[str, Any] | None = None
    strict: bool = False
    decision: SchemaDecision | None = None  # the JSON answer's schema verdict (schema_plan)


def schema_limits(limits: Limits, schema: Any, *, param: str) -> None:
    """Every user schema passes here: size and depth caps, and ``$ref`` only inside the document."""
    from server.structured.schema_refs import RefProblem, check_refs

    if nesting_exceeds(schema, limits.max_depth):
        raise bad_request(f"Schema nested too deeply (limit {limits.max_depth} levels).", param=param,
                          code="schema_too_deep")
    size = len(json.dumps(schema))
    if size > limits.max_bytes:
        raise bad_request(f"Schema too large: {size} bytes (limit {limits.max_bytes}).", param=param,
                          code="schema_too_large")
    try:
        check_refs(schema)
    except RefProblem as exc:
        raise bad_request(f"Invalid $ref: {exc}", param=param, code="invalid_schema") from None
    bound = _largest_minimum(schema)
    if bound is not None and bound[1] > limits.max_min_length:
        raise bad_request(
            f"Schema asks for {bound[0]} {bound[1]}, above this server's limit of {limits.max_min_length}: the "
            "grammar that enforces it would hold memory growing with every generated token. Lower it (or drop it "
            "and check the length yourself).", param=param, code="schema_too_large")


_INSTANCE_KEYS = frozenset({"enum", "const", "default", "examples"})  # values, not schemas


def _largest_minimum(schema: Any) -> tuple[str, int] | None:
    """The largest ``minLength`` / ``minItems`` anywhere in ``schema`` (iterative walk)."""
    best: tuple[str, int] | None = None
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in ("minLength", "minItems"):
                value = node.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and (best is None or value > best[1]):
                    best = (key, value)
            stack.extend(v for k, v in node.items() if k not in _INSTANCE_KEYS)
        elif isinstance(node, list):
            stack.extend(node)
    return best


def constraint_limits(limits: Limits, so: dict[str, Any] | None) -> None:
    """Size caps on ``structured_outputs`` choice / regex / grammar (the schema cap, in bytes)."""
    if not so:
        return
    limit = limits.max_bytes
    for key in ("regex", "grammar"):
        value = so.get(key)
        if isinstance(value, str) and len(value.encode("utf-8", "surrogatepass")) > limit:
            raise bad_request(f"structured_outputs.{key} too large: {len(value)} characters (limit {limit} bytes).",
                              param=f"structured_outputs.{key}", code="schema_too_large")
    choice = so.get("choice")
    if isinstance(choice, list):
        size = sum(len(c.encode("utf-8", "surrogatepass")) + 3 for c in choice)
        if len(choice) > MAX_CHOICES or size > limit:
            raise bad_request(f"structured_outputs.choice too large: {len(choice)} choices, {size} bytes (limit "
                              f"{MAX_CHOICES} choices, {limit} bytes).", param="structured_outputs.choice",
                              code="schema_too_large")


def _decided(spec: ConstraintSpec, schema: Any, *, strict: bool, param: str) -> SchemaDecision:
    """Caps and meta-schema, then the one decision (``schema_plan``): a strict schema that no
    backend enforces exactly is a 400 naming each keyword, pointer and backend tried; so is one
    that neither compiler can take at all."""
    schema_limits(spec.limits, schema, param=param)
    if not isinstance(schema, dict):
        raise bad_request("The schema must be a JSON object.", param=param, code="invalid_schema")
    check_schema(schema, param)  # meta-schema and nesting, as the builders check it too
    decision = decide_schema(schema, guidance=spec.guidance)
    if not decision.exact and (strict or not decision.xgrammar_compiles):
        raise bad_request(decision.refusal(), param=param, code="unsupported_schema")
    return decision


def _held_exactly(constraint: Constraint | None, decision: SchemaDecision | None, *, strict: bool,
                  param: str) -> None:
    """Where the JSON answer is part of a larger XGrammar constraint (thinking, tool calls,
    Harmony's framing), XGrammar must be exact on it too: llguidance cannot join that grammar."""
    if decision is None or not strict or constraint is None or constraint.backend == "llguidance":
        return
    if not decision.xgrammar_exact:
        listed = "; ".join(p.message() for p in decision.xgrammar_problems)
        raise bad_request(
            "This schema is enforced exactly only by llguidance, which cannot be combined with the reasoning block, "
            f"tool calls or the model's answer framing in one grammar; XGrammar is not exact on it: {listed}. Remove "
            "these keywords, send the request without tools or thinking, or set strict to false.",
            param=param, code="unsupported_schema")


def build(spec: ConstraintSpec) -> BuiltConstraint:
    """The one path from a spec to its constraint: every input checked once (caps, ``$ref``,
    strict support), then built; not compiled. Raises a 400 ``APIError`` for anything that
    cannot be enforced exactly. Pure: the spec is not changed."""
    if spec.empty:
        return BuiltConstraint(None)
    rf = json.loads(json.dumps(spec.response_format)) if spec.response_format else None  # a private copy
    so = dict(spec.structured_outputs) if spec.structured_outputs else None
    constraint_limits(spec.limits, so)
    schema: dict | None = None
    strict = False
    decision: SchemaDecision | None = None
    param = ""
    if rf and rf.get("type") == "json_schema" and "schema" not in rf["json_schema"]:
        rf = {"type": "json_object"}  # as OpenAI: a json_schema without a schema is any JSON object
    if rf and rf.get("type") == "json_schema":
        schema = rf["json_schema"]["schema"]
        strict = bool(rf["json_schema"].get("strict"))
        param = "response_format.json_schema.schema"
        decision = _decided(spec, schema, strict=strict, param=param)
        rf["json_schema"]["schema"] = decision.xgrammar_schema
    so_json = so.get("json") if so else None
    if so and isinstance(so_json, (dict, str)):
        so_schema = so_json if isinstance(so_json, dict) else _loads(so_json)
        param = "structured_outputs.json"
        decision = _decided(spec, so_schema, strict=True, param=param)
        so["json"] = decision.xgrammar_schema
        schema, strict = so_schema, True
    for tool in spec.tools.tools if spec.tools else ():
        if tool.parameters:
            schema_limits(spec.limits, tool.parameters, param=f"tools.{tool.name}.parameters")
    constraint = constraint_from_request(  # a ConstraintError is a 400 as it stands
        response_format=rf,
        structured_outputs=so,
        tools=spec.tools,
        tool_format=spec.call_format,
        reasoning=spec.reasoning,
        tool_constraints=spec.tool_constraints,
        guidance_schema=decision.llguidance_schema if decision and decision.backend == "llguidance" else None,
    )
    _held_exactly(constraint, decision, strict=strict, param=param)
    return BuiltConstraint(constraint, schema, strict, decision)


def compile_checked(cache: Any, constraint: Constraint | None) -> Any:
    """Compile through the cache (metrics counted); 400 naming xgrammar's reason when it fails."""
    if cache is None or constraint is None:
        return None
    result = cache.compile(constraint)
    if result.cached:
        metrics.GRAMMAR_CACHE_HITS.labels(constraint.backend).inc()
    else:
        metrics.GRAMMAR_CACHE_MISSES.labels(constraint.backend).inc()
        metrics.GRAMMAR_COMPILE.labels(constraint.backend).observe(result.seconds)
    if not result.ok:
        raise bad_request(result.error or "the constraint could not be compiled", code="invalid_constraint")
    return result


def new_constraint_memo() -> BoundedLRU[str, BuiltConstraint]:
    """Per process (on the ServerState): built constraints by their spec. An agent sends the
    same tools on every turn, and checking and building their constraint again cost ~1 ms per
    tool; one JSON dump of the spec finds it. Only successes are kept; a bad request is checked
    anew. Bounded in entries and in the size of their keys, so clients sending large, ever new
    tool sets cannot grow it."""
    return BoundedLRU(max_entries=256, max_chars=8 << 20)


def checked(spec: ConstraintSpec, *, memo: BoundedLRU[str, BuiltConstraint] | None, cache: Any) -> BuiltConstraint:
    """``build(spec)`` remembered in ``memo`` (keyed on the spec), then compiled through
    ``cache``: a constraint that does not compile is a 400 here, before any output. The same
    spec again gets the remembered result: shared, so nothing may change it."""
    if spec.empty or memo is None:
        if not spec.empty:
            may_block()
        built = build(spec)
    else:
        key = spec.memo_key  # None: not plain JSON, checked every time
        found = memo.get(key) if key is not None else None
        if found is None:
            may_block()  # a schema analysed, tools checked: never on the event loop
            found = build(spec)
            if key is not None:
                memo.put(key, found)
        built = found
    compile_checked(cache, built.constraint)
    return built


def state_memo(state: ServerState) -> BoundedLRU[str, BuiltConstraint]:
    """This process's constraint memo (made on first use)."""
    if state.constraint_memo is None:
        state.constraint_memo = new_constraint_memo()
    return state.constraint_memo


def request_constraint(state: ServerState, spec: ConstraintSpec) -> BuiltConstraint:
    """:func:`checked` with this process's memo and grammar cache."""
    return checked(spec, memo=state_memo(state), cache=state.grammar_cache)


def schema_request(schema: Any) -> ChatCompletionRequest:
    """The request a bare schema stands for (``--precompile``, the schema check): a non-strict
    ``json_schema`` response format, so they build exactly what such a request builds."""
    return ChatCompletionRequest.model_validate({
        "messages": [{"role": "user", "content": "-"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "schema", "schema": schema}},
    })


def _loads(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise bad_request(f"structured_outputs.json is not valid JSON: {exc}", param="structured_outputs.json",
                          code="invalid_schema") from None
    if not isinstance(value, dict):
        raise bad_request("structured_outputs.json must be a JSON Schema object.", param="structured_outputs.json",
                          code="invalid_schema")
    return value
