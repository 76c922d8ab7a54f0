"""``--precompile FILE``: compile known schemas / tool sets before ``/health`` turns ready.

The file is a JSON list; each item is either a JSON Schema (compiled as a
``json_schema`` response format) or an object with ``tools`` (and optionally
``tool_choice``, ``parallel_tool_calls``) or ``response_format``.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from .schema_support import normalize_schema
from .state import ServerState

__all__ = ["precompile_file", "precompile_items"]

log = logging.getLogger("gramserve.precompile")


def _request_parts(item: dict[str, Any]) -> dict[str, Any]:
    if "tools" in item:
        return {"response_format": None, "structured_outputs": None, "tools": item["tools"],
                "tool_choice": item.get("tool_choice", "auto"),
                "parallel_tool_calls": item.get("parallel_tool_calls", True)}
    rf = item.get("response_format") or {"type": "json_schema", "json_schema": {"name": "s", "schema": item}}
    if rf.get("type") == "json_schema" and isinstance(rf.get("json_schema", {}).get("schema"), dict):
        # requests compile the normalised schema (server.structured): warm that same cache key
        rf = {**rf, "json_schema": {**rf["json_schema"], "schema": normalize_schema(rf["json_schema"]["schema"])}}
    return {"response_format": rf, "structured_outputs": None, "tools": None, "tool_choice": None,
            "parallel_tool_calls": True}


def precompile_items(state: ServerState, items: list[dict[str, Any]]) -> list[str]:
    """Compile every item; returns the errors (one per failing item, with its index)."""
    from .constraints import ConstraintError, constraint_from_request

    errors = []
    for i, item in enumerate(items):
        parts = _request_parts(item)
        try:
            c = constraint_from_request(
                **parts,
                tool_format=getattr(state.tool_parser, "format", None) if parts["tools"] else None,
                tool_constraints=state.settings.tool_constraints,
            )
            if c is not None:
                result = state.grammar_cache.compile(c)
                if not result.ok:
                    errors.append(f"item {i}: {result.error}")
        except ConstraintError as exc:
            errors.append(f"item {i}: {exc}")
    return errors


def precompile_file(state: ServerState, path: Path) -> None:
    items = json.loads(path.read_text())
    if not isinstance(items, list):
        raise SystemExit(f"--precompile {path}: expected a JSON list of schemas or tool sets")
    errors = precompile_items(state, items)
    for e in errors:
        log.warning("precompile failed", extra={"detail": e})
    log.info("precompiled", extra={"items": len(items), "failed": len(errors)})
