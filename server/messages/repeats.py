"""The repeat guard (MessageStream, ``guard_repeats``): a call's arguments as a key that is equal
exactly when the parsed values are, the record of the calls already settled, and the check of a
parse's calls against them (:class:`RepeatCheck`, one per stream)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from tool_parsers.base import ToolCallPart

__all__ = ["CallsSeen", "RepeatCheck", "arguments_key"]


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


class RepeatCheck:
    """One stream's repeat guard: the settled calls' record, each arguments text parsed once (kept
    when the stream restarts its parse), and :attr:`repeat`, why the turn ended (once it did)."""

    def __init__(self) -> None:
        self.seen = CallsSeen()
        self.repeat: str | None = None
        self._parsed: dict[str, object] = {}  # arguments text -> JSON value, frozen (parsed once, not per token)

    def restart(self) -> None:
        """The stream parses from its start again: the settled calls are read again."""
        self.seen = CallsSeen()

    def kept(self, kept: list[ToolCallPart], done: list[ToolCallPart]) -> list[ToolCallPart]:
        """The calls after the settled ones (``kept``) up to the first repeat (which ends the
        turn), holding back an unfinished call to a function already called (it may turn out to
        be a repeat). The settled calls are read once, as they settle (their record grows with
        them), so a turn of many calls costs the same per token at its end as at its start.
        ``done``: the stream's settled calls."""
        seen = self.seen
        while seen.upto < len(done) and seen.stop is None:  # the calls settled since the last parse
            seen.stop = self._check(done[seen.upto], seen.upto, (seen.calls,))
            seen.upto += 1
        if seen.stop is not None:  # the settled calls already decided: all or none of the rest
            return kept if seen.stop == "all" else []
        layers: tuple[dict[str, set[object]], ...] = (seen.calls, {})  # this parse's calls on top, the record as it was
        for i, call in enumerate(kept):
            stop = self._check(call, len(done) + i, layers)
            if stop is not None:
                return kept if stop == "all" else kept[:i]
        return kept

    def _check(self, call: ToolCallPart, i: int, layers: tuple[dict[str, set[object]], ...]) -> str | None:
        """Call ``i`` of the turn against the calls before it (``layers``: name -> their arguments,
        frozen; the call goes into the last layer when it passes): None to go on, "all" to keep it
        and every call after it unchecked (an unfinished call to a name not called yet), "cut" to
        end the turn's calls before it."""
        if not call.complete:
            called = call.name is not None and any(call.name in layer for layer in layers)
            return "cut" if called else "all"
        name = call.name or ""
        args = self._parsed.get(call.arguments)
        if args is None:
            args = self._parsed[call.arguments] = arguments_key(call.arguments)
        if any(args in layer.get(name, ()) for layer in layers):
            if self.repeat is None:
                self.repeat = (f"tool call {i} repeats an earlier call to {call.name!r} with the same "
                                "arguments; the turn ended there (the model was looping)")
            return "cut"
        layers[-1].setdefault(name, set()).add(args)
        return None
