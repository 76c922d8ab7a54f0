"""Budget-aware closing, the front end's part: who gets it, the floor (a 400), and the mark.

A constrained answer that reaches ``max_tokens`` is closed validly inside the budget by the
engine (``server/engine/budget_grammar.py``) instead of being cut mid-JSON. Here:

* :func:`closing_constraint`: on by default for a strict ``json_schema`` answer
  (``structured_outputs.json`` included) and for ``tool_choice`` "required" or a named tool;
  ``close_within_budget: true`` asks for it on any other constraint, ``false`` turns it off;
* :func:`check_floor`: a budget below the shortest complete answer is a 400 that names the
  minimum, before anything is generated (the minimum is worked out once per constraint);
* :func:`closed_by_budget`: an answer the budget ended (``finish_reason`` stays ``length``) that
  is nevertheless complete is marked ``closed_by_budget: true`` on its choice.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from server.engine.budget_plan import closers_of
from server.errors import bad_request
from server.structured.constraints import Constraint

if TYPE_CHECKING:  # pragma: no cover
    from server.messages.deltas import FinalMessage
    from server.protocol import ChatCompletionRequest, CompletionRequest
    from server.structured.from_request import BuiltConstraint
    from server.structured.grammar_cache import GrammarCache
    from server.structured.spec import ConstraintSpec

__all__ = ["CLOSED_BY_BUDGET", "check_floor", "closed_by_budget", "closes_by_default", "closing_constraint"]

#: The choice field that marks an answer the budget ended and the grammar closed.
CLOSED_BY_BUDGET = "closed_by_budget"


def closes_by_default(spec: ConstraintSpec, built: BuiltConstraint) -> bool:
    """Strict JSON answers and required / named tool calls: a program parses them."""
    if spec.tools is not None and spec.tools.mode in ("required", "named"):
        return True
    return built.strict and built.schema is not None


def closing_constraint(req: ChatCompletionRequest | CompletionRequest, spec: ConstraintSpec,
                       built: BuiltConstraint) -> Constraint | None:
    """The request's constraint, with closing switched on where the request (or the default) wants it."""
    constraint = built.constraint
    if constraint is None or constraint.kind == "choice":  # a choice is one of its texts: nothing to close
        return constraint
    asked = getattr(req, "close_within_budget", None)
    if not (closes_by_default(spec, built) if asked is None else asked):
        return constraint
    closing = built.__dict__.get("_closing")  # one closing variant per built constraint (it is remembered
    if closing is not None:                   # across an agent's turns: the same object again, no rework)
        return closing
    styles = [spec.call_format.arguments_style] if spec.call_format is not None and spec.tools else []
    value = constraint.value if constraint.kind == "structural_tag" and isinstance(constraint.value, dict) else None
    closing = replace(constraint, closes=True, closers=closers_of(value, styles=styles))
    built.__dict__["_closing"] = closing  # frozen dataclass: not a field, so eq and hash are unchanged
    return closing


def check_floor(cache: GrammarCache | None, constraint: Constraint | None, max_tokens: int, *, param: str) -> int | None:
    """400 when ``max_tokens`` cannot hold the shortest complete answer; returns that minimum."""
    if cache is None or constraint is None or not constraint.closes:
        return None
    need = cache.min_tokens(constraint)
    if need is not None and max_tokens < need:
        raise bad_request(  # (parameters through the namer: Responses calls them max_output_tokens, text.format)
            lambda n: f"'{n(param)}' is {max_tokens}, but the shortest answer that fits this request's output format "
                      f"({n('response_format')}, structured_outputs or required tool calls) takes {need} tokens. "
                      f"Raise '{n(param)}' to at least {need}, or send \"close_within_budget\": false to let the "
                      "answer be cut.",
            param=param, code="max_tokens_too_small")
    return need


def closed_by_budget(constraint: Constraint | None, finish: str | None, final: FinalMessage, outcome: str | None) -> bool:
    """Whether an answer the budget ended is complete anyway (closed by the grammar, not cut)."""
    if constraint is None or not constraint.closes or finish != "length":
        return False
    if final.tool_calls:
        return not final.unfinished
    if outcome is not None:
        return outcome == "valid"
    if constraint.kind in ("json", "json_object"):
        import json

        try:
            json.loads(final.content or "")
        except ValueError:
            return False
        return True
    return False
