"""A request's structured-output constraint, checked before it reaches the engine.

Fail closed: a constraint that cannot be applied exactly as asked is a 400 naming
the problem, never 200 with unconstrained text. Under ``strict`` (and for
``structured_outputs.json``), a schema using keywords the grammar enforces only
loosely is rejected; without ``strict`` it is served and validated afterwards.
"""
from __future__ import annotations

import json
from typing import Any

from server import metrics
from server.errors import bad_request
from server.lru import BoundedLRU
from server.protocol import ChatCompletionRequest
from server.state import ServerState
from server.structured.constraints import check_schema, nesting_exceeds
from server.structured.schema_support import normalize_schema

__all__ = ["new_constraint_memo", "build_constraint", "request_constraint", "compile_checked", "schema_request",
           "schema_limits", "constraint_limits", "MAX_CHOICES"]

MAX_CHOICES = 1024  # a choice list is a grammar of alternatives: beyond this it is a schema's job


def schema_limits(state: ServerState, schema: Any, *, param: str) -> None:
    """Every user schema passes here: size and depth caps, and ``$ref`` only inside the document."""
    from server.structured.schema_refs import RefProblem, check_refs

    s = state.settings
    if nesting_exceeds(schema, s.max_schema_depth):
        raise bad_request(f"Schema nested too deeply (limit {s.max_schema_depth} levels).", param=param,
                          code="schema_too_deep")
    size = len(json.dumps(schema))
    if size > s.max_schema_bytes:
        raise bad_request(f"Schema too large: {size} bytes (limit {s.max_schema_bytes}).", param=param,
                          code="schema_too_large")
    try:
        check_refs(schema)
    except RefProblem as exc:
        raise bad_request(f"Invalid $ref: {exc}", param=param, code="invalid_schema") from None
    bound = _largest_minimum(schema)
    if bound is not None and bound[1] > s.max_schema_min_length:
        raise bad_request(
            f"Schema asks for {bound[0]} {bound[1]}, above this server's limit of {s.max_schema_min_length}: the "
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


def constraint_limits(state: ServerState, so: dict[str, Any] | None) -> None:
    """Size caps on ``structured_outputs`` choice / regex / grammar (the schema cap, in bytes)."""
    if not so:
        return
    limit = state.settings.max_schema_bytes
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


def _strict_check(schema: dict[str, Any], *, param: str) -> None:
    from server.structured.schema_support import analyze_schema

    # vLLM compiles JSON Schemas with xgrammar's default strict_mode=True.
    problems = analyze_schema(schema, strict_mode=True).strict_problems()
    if problems:
        listed = "; ".join(problems)
        raise bad_request(
            "This schema cannot be enforced exactly under strict mode: " + listed
            + ". Remove these keywords, or set strict to false to have the output validated after generation.",
            param=param, code="unsupported_schema",
        )


def _check_schema(state: ServerState, schema: Any, *, strict: bool, param: str) -> None:
    schema_limits(state, schema, param=param)
    if not isinstance(schema, dict):
        raise bad_request("The schema must be a JSON object.", param=param, code="invalid_schema")
    check_schema(schema, param)  # the one schema check (meta-schema, nesting, grammar) the builders use too
    if strict:  # judged on what is compiled: normalize_schema keeps every keyword at its pointer
        _strict_check(normalize_schema(schema), param=param)


def reasoning_spec(state: ServerState, req: Any) -> Any:
    """The think block the grammar must let through before the constrained answer, if any."""
    from server.structured.constraints import ReasoningSpec

    parser = state.reasoning_parser
    if parser is None:
        return None
    if not isinstance(req, ChatCompletionRequest) or not req.thinking_enabled():
        return None  # text completions are not split into reasoning and answer
    return ReasoningSpec(start=parser.start, end=parser.end, starts_open=parser.starts_open,
                         required=state.settings.reasoning_required)


def build_constraint(state: ServerState, req: Any, tools: list[dict[str, Any]] | None) -> tuple[Any, dict | None, bool]:
    """Returns (constraint or None, schema to validate afterwards or None, strict), compiled:
    a constraint that does not compile is a 400 here, before any output."""
    constraint, schema, strict = request_constraint(state, req, tools)
    if constraint is not None:
        compile_checked(state, constraint)
    return constraint, schema, strict


def compile_checked(state: ServerState, constraint: Any) -> Any:
    """Compile through the cache (metrics counted); 400 naming xgrammar's reason when it fails."""
    if state.grammar_cache is None:
        return None
    result = state.grammar_cache.compile(constraint)
    if result.cached:
        metrics.GRAMMAR_CACHE_HITS.inc()
    else:
        metrics.GRAMMAR_CACHE_MISSES.inc()
        metrics.GRAMMAR_COMPILE.observe(result.seconds)
    if not result.ok:
        raise bad_request(result.error or "the constraint could not be compiled", code="invalid_constraint")
    return result


def schema_request(schema: dict[str, Any]) -> ChatCompletionRequest:
    """The request a bare schema stands for (``--precompile``, the schema check): a non-strict
    ``json_schema`` response format, so they build exactly what such a request builds."""
    return ChatCompletionRequest.model_validate({
        "messages": [{"role": "user", "content": "-"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "schema", "schema": schema}},
    })


def new_constraint_memo() -> BoundedLRU[str, tuple[Any, dict | None, bool]]:
    """Per process (on the ServerState): a request's checked constraint by its inputs. An agent
    sends the same tools on every turn, and checking and building their constraint again cost
    ~1 ms per tool (32 tools: 30 ms of CPU per request); one JSON dump of the inputs finds it.
    Only successes are kept; a bad request is checked anew. Bounded in entries and in the size
    of their inputs (what they hold grows with it), so clients sending large, ever new tool sets
    cannot grow it."""
    return BoundedLRU(max_entries=256, max_chars=8 << 20)


def _memo(state: ServerState) -> BoundedLRU[str, tuple[Any, dict | None, bool]]:
    if state.constraint_memo is None:
        state.constraint_memo = new_constraint_memo()
    return state.constraint_memo


def request_constraint(state: ServerState, req: Any,
                       tools: list[dict[str, Any]] | None) -> tuple[Any, dict | None, bool]:
    """The one path from a request to its constraint: every input checked once (caps, ``$ref``,
    strict support), then built; not compiled. Chat, completions, ``--precompile`` and the
    schema check all come through here. The same inputs again (an agent's next turn) get the
    remembered result: the constraint and schema are shared then, and nothing may change them."""
    rf = req.response_format.model_dump(by_alias=True, exclude_none=True) if req.response_format else None
    so = req.structured_outputs.model_dump(by_alias=True, exclude_none=True) if req.structured_outputs else None
    tool_choice = getattr(req, "tool_choice", None)
    if hasattr(tool_choice, "names"):  # allowed_tools: the grammar offers only those
        tool_choice = {"type": "allowed_tools", "mode": tool_choice.allowed_tools.mode, "names": tool_choice.names()}
    elif hasattr(tool_choice, "model_dump"):
        tool_choice = tool_choice.model_dump()
    reasoning = reasoning_spec(state, req)
    parallel = getattr(req, "parallel_tool_calls", True)
    if not (rf or so or tools):
        return _request_constraint(state, rf, so, tools, tool_choice, parallel, reasoning)
    try:  # key order kept: property order is part of the grammar
        key = json.dumps([rf, so, tools, tool_choice, parallel, repr(reasoning)], separators=(",", ":"),
                         ensure_ascii=False)
    except (TypeError, ValueError):  # not plain JSON: check it every time
        return _request_constraint(state, rf, so, tools, tool_choice, parallel, reasoning)
    memo = _memo(state)
    found = memo.get(key)
    if found is None:
        found = _request_constraint(state, rf, so, tools, tool_choice, parallel, reasoning)
        memo.put(key, found)
    return found


def _request_constraint(state: ServerState, rf: dict | None, so: dict | None, tools: list[dict[str, Any]] | None,
                        tool_choice: Any, parallel: bool, reasoning: Any) -> tuple[Any, dict | None, bool]:
    from server.structured.constraints import constraint_from_request

    constraint_limits(state, so)
    schema: dict | None = None
    strict = False
    if rf and rf.get("type") == "json_schema" and "schema" not in rf["json_schema"]:
        rf = {"type": "json_object"}  # as OpenAI: a json_schema without a schema is any JSON object
    if rf and rf.get("type") == "json_schema":
        schema = rf["json_schema"]["schema"]
        strict = bool(rf["json_schema"].get("strict"))
        _check_schema(state, schema, strict=strict, param="response_format.json_schema.schema")
        rf["json_schema"]["schema"] = normalize_schema(schema)
    if so and isinstance(so.get("json"), (dict, str)):
        so_schema = so["json"] if isinstance(so["json"], dict) else _loads(so["json"])
        _check_schema(state, so_schema, strict=True, param="structured_outputs.json")
        so["json"] = normalize_schema(so_schema)
        schema, strict = so_schema, True
    for t in tools or []:
        params = t["function"].get("parameters")
        if params:
            schema_limits(state, params, param=f"tools.{t['function']['name']}.parameters")
    constraint = constraint_from_request(  # a ConstraintError is a 400 as it stands
        response_format=rf,
        structured_outputs=so,
        tools=tools,
        tool_choice=tool_choice if tools else None,
        parallel_tool_calls=parallel,
        tool_format=getattr(state.tool_parser, "format", None) if tools else None,
        reasoning=reasoning,
        tool_constraints=state.settings.tool_constraints,
    )
    return constraint, schema, strict


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
