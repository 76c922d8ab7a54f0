"""``tool_choice`` read once: the one place that interprets it and checks it against the tools.

Chat's four shapes ("none" / "auto" / "required", a named function, ``allowed_tools``), the
legacy ``function_call`` and Responses' flat form all reach the grammar as chat's shape
(``server/structured/spec.py`` normalises them); :func:`read_tool_choice` turns that into a
typed :class:`ToolChoice`, which the grammar builder, the finishing checks and budget-aware
closing read instead of the raw value.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from server.structured.errors import ConstraintError

__all__ = ["ToolChoice", "ToolMode", "check_choice_has_tools", "read_tool_choice"]

ToolMode = Literal["none", "auto", "required", "named"]


@dataclass(frozen=True)
class ToolChoice:
    """What the model may do with the tools: ``mode``, the one ``named`` tool, the ``allowed``
    subset (``allowed_tools``; None: every tool)."""

    mode: ToolMode
    named: str | None = None
    allowed: tuple[str, ...] | None = None


def check_choice_has_tools(choice: object, *, has_tools: bool) -> None:
    """The first check of a chat request, before anything is rendered: a ``tool_choice`` other
    than "none" asks for tools the request must give."""
    if choice not in (None, "none") and not has_tools:
        raise ConstraintError("'tool_choice' is set but no 'tools' were given.", "tool_choice", code="invalid_value")


def read_tool_choice(choice: str | dict[str, Any] | None, names: Sequence[str]) -> ToolChoice:
    """``choice`` against the request's tool ``names``; ConstraintError (a 400 on ``tool_choice``)
    for a choice that names what is not there or that no tool can satisfy."""
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        allowed = tuple(choice.get("names") or ())
        unknown = [n for n in allowed if n not in names]
        if unknown:
            raise ConstraintError(f"tool_choice.allowed_tools names {', '.join(map(repr, unknown))}, which "
                                  f"{'is' if len(unknown) == 1 else 'are'} not in tools.", "tool_choice")
        mode = str(choice.get("mode") or "auto")
        if mode not in ("auto", "required"):
            raise ConstraintError(f"tool_choice.allowed_tools mode {mode!r} is not 'auto' or 'required'.",
                                  "tool_choice")
        return ToolChoice("required" if mode == "required" else "auto", allowed=allowed)
    if choice is None:
        return ToolChoice("auto" if names else "none")
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise ConstraintError(
                f"tool_choice {choice!r} is not supported; use 'none', 'auto', 'required' or a named function.",
                "tool_choice")
        if choice == "required" and not names:
            raise ConstraintError("tool_choice 'required' needs at least one tool in 'tools'.", "tool_choice")
        return ToolChoice(choice if names else "none")  # type: ignore[arg-type]  # one of the three
    fn = choice.get("function") if isinstance(choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str) or not name:
        raise ConstraintError(
            "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}.",
            "tool_choice")
    if not names:
        raise ConstraintError(f"tool_choice names the function {name!r} but no tools were given.", "tool_choice")
    if name not in names:
        raise ConstraintError(
            f"tool_choice names the function {name!r}, which is not in tools (known: {', '.join(names)}).",
            "tool_choice")
    return ToolChoice("named", named=name)
