"""The schema diagnostics report (``POST /v1/schemas/check``, ``gramserve check-schema``).

For a JSON Schema or a tools list: does it compile, how is each keyword enforced (exact /
loose / rejected per JSON pointer), would ``strict`` accept it, how long did it compile,
and was it already cached.
"""
from __future__ import annotations

from typing import Any, Callable

from server.errors import APIError
from server.structured.constraints import Constraint, constraint_from_request
from server.structured.schema_support import analyze_schema, normalize_schema

__all__ = ["check_schema_report", "schema_constraint", "split_body"]


def split_body(body: Any) -> list[tuple[str, dict[str, Any]]]:
    """(label, schema) pairs: one schema, or each tool's parameters."""
    tools = body if isinstance(body, list) else body.get("tools") if isinstance(body, dict) else None
    if isinstance(body, dict) and isinstance(body.get("schema"), dict) and "tools" not in body:
        return [("schema", body["schema"])]
    if tools is None:
        if not isinstance(body, dict):
            raise ValueError("send a JSON Schema object, {\"schema\": ...}, or a tools list")
        return [("schema", body)]
    out = []
    for i, t in enumerate(tools):
        fn = (t or {}).get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ValueError(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\", \"parameters\"}}}}")
        out.append((f"tools[{i}]:{fn['name']}", fn.get("parameters") or {"type": "object", "properties": {}}))
    return out


def schema_constraint(schema: dict[str, Any]) -> Constraint | None:
    """What a request with ``schema`` as its (non-strict) ``json_schema`` response format
    compiles when the server has no reasoning parser (the offline CLI's view)."""
    rf = {"type": "json_schema", "json_schema": {"name": "schema", "schema": normalize_schema(schema)}}
    return constraint_from_request(response_format=rf, structured_outputs=None, tools=None, tool_choice=None,
                                   parallel_tool_calls=True, tool_format=None)


def check_schema_report(body: Any, *, cache: Any,
                        constraint_for: Callable[[dict[str, Any]], Any] = schema_constraint) -> dict[str, Any]:
    """The report for every schema in ``body``; ``cache`` is a GrammarCache (compiles and counts).
    ``constraint_for`` builds what a request would compile for a schema (the server passes its
    own request path, so the report judges exactly that)."""
    items = []
    for label, schema in split_body(body):
        report = analyze_schema(schema, strict_mode=True)
        problems = report.strict_problems()
        try:
            result = cache.compile(constraint_for(schema))
            compiled = {"compiles": result.ok, "error": result.error, "compile_seconds": round(result.seconds, 6),
                        "cached": result.cached}
        except APIError as exc:  # refused before compiling (ConstraintError included)
            compiled = {"compiles": False, "error": str(exc), "compile_seconds": None, "cached": False}
        items.append({
            "name": label,
            **compiled,
            "strict_ok": compiled["compiles"] and not problems,
            "problems": problems,
            "keywords": [{"pointer": e.pointer or "/", "keyword": e.keyword, "level": e.level, "note": e.note}
                         for e in report.entries],
        })
    return {"ok": all(i["strict_ok"] for i in items), "items": items}
