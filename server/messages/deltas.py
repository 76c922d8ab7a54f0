"""The OpenAI message pieces a stream is made of, and :func:`compute_deltas`, the one function
that knows OpenAI's streaming rules (see :mod:`server.messages.message_stream`, which re-exports
all of it and is where the rules are described)."""
from __future__ import annotations

import os
import string
from dataclasses import dataclass, field

from tool_parsers.base import ToolCallPart

__all__ = ["Parsed", "ToolCallDelta", "MessageDelta", "FinalToolCall", "FinalMessage", "StreamRetractionError",
           "compute_deltas", "new_tool_call_id", "merge_deltas", "apply_delta"]

_ID_ALPHABET = string.ascii_letters + string.digits
# One urandom read per id instead of 24 secrets.choice calls (about 20 -> 0.7 µs a call id): each
# byte below 248 (= 4 x 62) is one character, uniformly; the rest are dropped. 32 bytes leave fewer
# than 24 with probability ~1e-7, and then a new read is drawn.
_ID_TABLE = bytes(ord(_ID_ALPHABET[b % len(_ID_ALPHABET)]) if b < 248 else 0 for b in range(256))
_ID_REJECT = bytes(range(248, 256))


def new_tool_call_id() -> str:
    """``call_`` + 24 random alphanumerics (the shape OpenAI uses), from the OS's CSPRNG."""
    while True:
        picked = os.urandom(32).translate(_ID_TABLE, _ID_REJECT)
        if len(picked) >= 24:
            return "call_" + picked[:24].decode("ascii")


@dataclass(slots=True)  # one per parse (per token): as MessageDelta
class Parsed:
    """One view of the message: what the client should have seen so far.

    ``tool_calls`` holds only calls that may be streamed (validated names); a call whose
    name is None may only be last and is not streamed yet. ``tool_call_ids[i]`` is the id
    of ``tool_calls[i]`` (filled by :class:`MessageStream`).
    """

    reasoning: str
    content: str
    tool_calls: tuple[ToolCallPart, ...] = ()
    tool_call_ids: tuple[str, ...] = ()


@dataclass(slots=True)  # one per streamed argument fragment: as MessageDelta
class ToolCallDelta:
    """One ``delta.tool_calls[]`` entry. A header (first for its index) has id and name
    set and ``arguments == ""``; an argument fragment has both None."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(slots=True)  # one per streamed token: not frozen, whose __init__ is 4x slower; never changed after
class MessageDelta:
    """What one step adds. ``tool_calls`` entries are in emission order; an index may
    appear twice (its header, then its first fragment): send one SSE chunk per entry to
    match OpenAI's recorded streams."""

    reasoning: str | None = None
    content: str | None = None
    tool_calls: tuple[ToolCallDelta, ...] = ()


@dataclass(frozen=True)
class FinalToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class FinalMessage:
    """The assembled message. Empty reasoning/content are None. ``dropped`` explains calls
    removed because their name is not among the request's tools; ``errors`` explains
    malformed calls (kept as content, or kept as streamed, see the module docstring)."""

    reasoning: str | None
    content: str | None
    tool_calls: list[FinalToolCall]
    dropped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)  # a looping duplicate call ended the turn
    # Indexes (into ``tool_calls``) of calls kept as far as they were written: the output ended
    # inside them, or their arguments broke. Their arguments are a prefix, not JSON to run.
    unfinished: list[int] = field(default_factory=list)


class StreamRetractionError(ValueError):
    """The new parse contradicts text already sent; deltas cannot express that."""


_CHECK = 32  # how much of the sent text is compared with the new parse (the rest by length)


def _grown(previous: str, current: str, what: str) -> str:
    # Parsers only extend what they returned (checkpoints keep these strings short); the
    # tail comparison catches a parse that changed its mind, without re-reading all of it.
    k = len(previous)
    if len(current) < k or (k and not current.startswith(previous[-_CHECK:], max(0, k - _CHECK))):
        raise StreamRetractionError(
            f"{what} would have to be retracted: sent {previous[-40:]!r}, now {current[-40:]!r}"
        )
    return current[k:]


def compute_deltas(previous: Parsed, current: Parsed, *, first_index: int = 0) -> MessageDelta | None:
    """The delta from ``previous`` to ``current`` (None when nothing new). ``first_index``:
    the OpenAI index of their first call (when both hold only the calls after it).

    Raises :class:`StreamRetractionError` when ``current`` does not extend ``previous``.
    """
    reasoning = _grown(previous.reasoning, current.reasoning, "reasoning")
    content = _grown(previous.content, current.content, "content")
    sent = [c for c in previous.tool_calls if c.name is not None]
    now = [c for c in current.tool_calls if c.name is not None]
    if len(now) < len(sent):
        raise StreamRetractionError(f"{len(sent) - len(now)} streamed tool call(s) disappeared")
    deltas: list[ToolCallDelta] = []
    for index, call in enumerate(now):
        at = first_index + index
        if index < len(sent):
            old = sent[index]
            if call.name != old.name or current.tool_call_ids[index] != previous.tool_call_ids[index]:
                raise StreamRetractionError(f"tool call {at} changed from {old.name!r} to {call.name!r}")
            fragment = _grown(old.arguments, call.arguments, f"arguments of tool call {at}")
        else:
            deltas.append(ToolCallDelta(at, current.tool_call_ids[index], call.name, ""))
            fragment = call.arguments
        if fragment:
            deltas.append(ToolCallDelta(at, None, None, fragment))
    if not (reasoning or content or deltas):
        return None
    return MessageDelta(reasoning or None, content or None, tuple(deltas))


def merge_deltas(a: MessageDelta | None, b: MessageDelta | None) -> MessageDelta | None:
    """One delta that adds what ``a`` then ``b`` add."""
    if a is None or b is None:
        return a if b is None else b
    return MessageDelta(((a.reasoning or "") + (b.reasoning or "")) or None,
                        ((a.content or "") + (b.content or "")) or None, a.tool_calls + b.tool_calls)


def apply_delta(sent: Parsed, delta: MessageDelta, first: int) -> Parsed:
    """``sent`` with ``delta``'s argument fragments appended (call indices counted from ``first``),
    so what was sent stays the record of every delta returned."""
    calls = list(sent.tool_calls)
    for part in delta.tool_calls:
        call = calls[part.index - first]
        calls[part.index - first] = ToolCallPart(call.name, call.arguments + (part.arguments or ""), call.complete)
    return Parsed(sent.reasoning, sent.content, tuple(calls), sent.tool_call_ids)
