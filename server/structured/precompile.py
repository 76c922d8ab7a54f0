"""``--precompile FILE``: compile known schemas / tool sets before ``/health`` turns ready.

The file is a JSON list; each item is either a JSON Schema (compiled as a non-strict
``json_schema`` response format) or an object with ``tools`` (and optionally
``tool_choice``, ``parallel_tool_calls``) or ``response_format``. Each item becomes the
request it stands for, then the spec such a request builds (:func:`constraint_spec`), so it
warms exactly the memo entry and cache key that requests use (reasoning parser included).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import ValidationError

from server.errors import APIError
from server.json_types import JsonValue
from server.protocol import ChatCompletionRequest
from server.state import ServerState
from server.structured.from_request import capabilities, request_constraint, schema_request
from server.structured.spec import constraint_spec

__all__ = ["precompile_file", "precompile_items", "item_request"]

log = logging.getLogger("gramserve.precompile")

_REQUEST_KEYS = ("tools", "tool_choice", "parallel_tool_calls", "response_format")


def item_request(item: JsonValue) -> ChatCompletionRequest:
    """The chat request a precompile item stands for. An item that is not an object is a schema,
    or the TypeError that reading it as an object raises (:func:`precompile_items` reports it)."""
    if isinstance(item, dict):
        if "tools" in item or "response_format" in item:
            body = {"messages": [{"role": "user", "content": "-"}], **{k: item[k] for k in _REQUEST_KEYS if k in item}}
            return ChatCompletionRequest.model_validate(body)
    elif not isinstance(item, (list, str)):  # a number, true / false or null: not searchable for keys
        raise TypeError(f"argument of type '{type(item).__name__}' is not iterable")
    elif "tools" in item or "response_format" in item:  # a list / text holding the word: not indexable by it
        raise TypeError("list indices must be integers or slices, not str" if isinstance(item, list)
                        else "string indices must be integers, not 'str'")
    return schema_request(item)


def precompile_items(state: ServerState, items: list[JsonValue]) -> list[str]:
    """Compile every item; returns the errors (one per failing item, with its index)."""
    errors = []
    caps = capabilities(state)
    for i, item in enumerate(items):
        try:
            request_constraint(state, constraint_spec(item_request(item), caps))
        except APIError as exc:
            errors.append(f"item {i}: {exc.message}")
        except (ValidationError, TypeError) as exc:
            errors.append(f"item {i}: not a schema or a request part: {exc}")
    return errors


def precompile_file(state: ServerState, path: Path) -> None:
    items = json.loads(path.read_text())
    if not isinstance(items, list):
        raise SystemExit(f"--precompile {path}: expected a JSON list of schemas or tool sets")
    errors = precompile_items(state, items)
    for e in errors:
        log.warning("precompile failed", extra={"detail": e})
    log.info("precompiled", extra={"items": len(items), "failed": len(errors)})
