"""Checks on what the model produced, after generation: never silent.

Tool-call arguments are validated against their tool's schema (the grammar already
guarantees this when constraints are on; with ``--no-tool-constraints`` this is what
reports misfits), and non-strict JSON outputs are validated against their schema so
the response can say whether they fit.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING

from jsonschema import Draft202012Validator

from server import metrics
from server.json_types import JsonValue
from server.lru import BoundedLRU
from server.structured.schema_refs import local_validator

if TYPE_CHECKING:
    from server.messages.deltas import FinalMessage

__all__ = ["ToolCallChecker", "schema_validator", "shared_schema_validator", "validate_json_output"]

log = logging.getLogger("gramserve.checks")


@lru_cache(maxsize=128)
def _validator(schema_json: str) -> Draft202012Validator:
    # An empty registry: a $ref is never fetched (no network, no file system).
    return local_validator(json.loads(schema_json))


def schema_validator(schema: JsonValue) -> Draft202012Validator:
    """A cached validator per canonical schema (per process)."""
    return _validator(json.dumps(schema, sort_keys=True))


#: Validators by the identity of a schema object that is never changed once made: the plan's JSON
#: schema, which the constraint memo hands every request with the same format (server/plan/build.py).
#: Each entry holds its schema, so the id stays that object's. Per process, bounded.
_SHARED: BoundedLRU[int, tuple[JsonValue, Draft202012Validator]] = BoundedLRU(max_entries=64)


def shared_schema_validator(schema: JsonValue) -> Draft202012Validator:
    """:func:`schema_validator` for a schema object that is shared and never changed (the memo's): found
    by identity, so a request does not serialise the schema again (0.08-0.33 ms for a 35 KB schema,
    docs/performance.md)."""
    hit = _SHARED.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    validator = schema_validator(schema)
    _SHARED.put(id(schema), (schema, validator))
    return validator


def _fits(value: JsonValue, schema: JsonValue, *, shared: bool = False) -> bool:
    try:
        return (shared_schema_validator(schema) if shared else schema_validator(schema)).is_valid(value)
    except Exception:  # an invalid schema cannot validate anything
        return False


class ToolCallChecker:
    """Counts tool-call outcomes for ``gramserve_tool_calls_total``."""

    def __init__(self, *, parser: str) -> None:
        self.parser = parser

    def check(self, final: FinalMessage, schemas: Mapping[str, JsonValue]) -> list[str]:
        """Returns one outcome per returned call (valid | invalid_arguments)."""
        outcomes = []
        for call in final.tool_calls:
            try:
                args = json.loads(call.arguments)
                ok = isinstance(args, dict) and _fits(args, schemas.get(call.name) or {})
            except ValueError:
                ok = False
            outcome = "valid" if ok else "invalid_arguments"
            if not ok:
                log.warning("tool call %s has arguments that do not fit its schema", call.name)
            metrics.TOOL_CALLS.labels(self.parser, outcome).inc()
            outcomes.append(outcome)
        for reason in final.dropped:
            log.warning("tool call dropped: %s", reason)
            metrics.TOOL_CALLS.labels(self.parser, "unknown_name").inc()
        for reason in final.errors:
            log.warning("tool call not parsed, returned as content: %s", reason)
            metrics.TOOL_CALLS.labels(self.parser, "unparsed").inc()
        for reason in getattr(final, "repeated", ()):
            log.warning("duplicate tool call dropped: %s", reason)
            metrics.TOOL_CALLS.labels(self.parser, "duplicate").inc()
        return outcomes


def validate_json_output(text: str, schema: JsonValue, *, finished: bool, shared: bool = False) -> str:
    """Outcome of validating one JSON output: valid | invalid | skipped_length. ``shared``: ``schema``
    is a shared object never changed (:func:`shared_schema_validator`)."""
    if not finished:
        outcome = "skipped_length"
    else:
        try:
            outcome = "valid" if _fits(json.loads(text), schema, shared=shared) else "invalid"
        except ValueError:
            outcome = "invalid"
    metrics.SO_VALIDATIONS.labels(outcome).inc()
    return outcome
