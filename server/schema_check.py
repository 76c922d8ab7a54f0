"""The schema diagnostics report (``POST /v1/schemas/check``, ``gramserve check-schema``).

For a JSON Schema or a tools list: does it compile, how is each keyword enforced (exact /
loose / rejected per JSON pointer), would ``strict`` accept it, how long did it compile,
and was it already cached.
"""
from __future__ import annotations

from typing import Any

from .constraints import Constraint, ConstraintError
from .schema_support import analyze_schema, normalize_schema

__all__ = ["check_schema_report", "split_body"]


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


def check_schema_report(body: Any, *, cache: Any) -> dict[str, Any]:
    """The report for every schema in ``body``; ``cache`` is a GrammarCache (compiles and counts)."""
    items = []
    for label, schema in split_body(body):
        report = analyze_schema(schema, strict_mode=True)
        problems = report.strict_problems()
        try:
            result = cache.compile(Constraint(kind="json", value=normalize_schema(schema)))
            compiled = {"compiles": result.ok, "error": result.error, "compile_seconds": round(result.seconds, 6),
                        "cached": result.cached}
        except ConstraintError as exc:
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
