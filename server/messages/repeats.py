"""The repeat guard's pieces (MessageStream, ``guard_repeats``): a call's arguments as a key that is
equal exactly when the parsed values are, and the record of the calls already settled."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = ["CallsSeen", "arguments_key"]


@dataclass
class CallsSeen:
    """The repeat check's record of the settled calls (one per stream): their arguments by name,
    how many were read, and (once one of them decided it) "all" or "cut" for every later call."""

    calls: dict[str, set[object]] = field(default_factory=dict)
    upto: int = 0
    stop: str | None = None


def arguments_key(arguments: str) -> object:
    """Arguments as a hashable value equal exactly when the parsed JSON values are (``==``: objects
    whatever their key order, ``1 == 1.0``), so a repeat is found by a set lookup. "" is {};
    unparsable text compares as text."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return arguments
    return _frozen(value)


def _frozen(value: object) -> object:
    if isinstance(value, dict):
        return frozenset((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value
