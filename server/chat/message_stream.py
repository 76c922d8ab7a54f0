"""From generated text to OpenAI message deltas, and the final message.

:func:`compute_deltas` is the only code that knows the OpenAI streaming rules:

* reasoning and content only grow; a delta carries the new suffix;
* per tool-call index, the first delta carries ``index``, ``id``, ``type="function"``,
  ``name`` and ``arguments: ""``; later deltas carry only argument fragments;
* indexes only grow (a call is never retracted or renamed).

:class:`MessageStream` (one per request) re-parses the whole text on each feed
(reasoning split, then tool parse on the rest), filters calls, assigns ids, and diffs
against what was already sent. Concatenating every delta gives exactly
:meth:`MessageStream.final_message`.

Repeats: with ``guard_repeats``, a complete call identical to an earlier call of the same
turn (same name, arguments equal as parsed JSON) means the model is looping: the turn ends
before it, the duplicate is never returned or streamed (a later call to an already-called
function is held back until complete, then released or dropped), everything generated
after it is ignored, and :attr:`MessageStream.repeat` says why.

Conflicts: a parser may learn late that a call whose name was already streamed is
malformed (invalid JSON after the name, or the text ends inside it). Sent deltas cannot be
taken back, so the stream keeps what it sent, stops emitting, and records the reason in
``FinalMessage.errors``. A non-streamed request (``finish(whole_text)`` with nothing fed
before) sees the parser's final verdict instead: the malformed call's text as content.
"""
from __future__ import annotations

import json
import secrets
import string
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from reasoning_parsers.base import ReasoningParser
from tool_parsers.base import ScanCache, ToolCallPart, ToolParser

__all__ = [
    "Parsed",
    "ToolCallDelta",
    "MessageDelta",
    "FinalToolCall",
    "FinalMessage",
    "StreamRetractionError",
    "compute_deltas",
    "new_tool_call_id",
    "MessageStream",
]

_ID_ALPHABET = string.ascii_letters + string.digits


def new_tool_call_id() -> str:
    """``call_`` + 24 random alphanumerics (the shape OpenAI uses)."""
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class ToolCallDelta:
    """One ``delta.tool_calls[]`` entry. A header (first for its index) has id and name
    set and ``arguments == ""``; an argument fragment has both None."""

    index: int
    id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True)
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


class StreamRetractionError(ValueError):
    """The new parse contradicts text already sent; deltas cannot express that."""


def _grown(previous: str, current: str, what: str) -> str:
    if not current.startswith(previous):
        raise StreamRetractionError(
            f"{what} would have to be retracted: sent {previous[-40:]!r}, now {current[-40:]!r}"
        )
    return current[len(previous) :]


def compute_deltas(previous: Parsed, current: Parsed) -> MessageDelta | None:
    """The delta from ``previous`` to ``current`` (None when nothing new).

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
        if index < len(sent):
            old = sent[index]
            if call.name != old.name or current.tool_call_ids[index] != previous.tool_call_ids[index]:
                raise StreamRetractionError(f"tool call {index} changed from {old.name!r} to {call.name!r}")
            fragment = _grown(old.arguments, call.arguments, f"arguments of tool call {index}")
        else:
            deltas.append(ToolCallDelta(index, current.tool_call_ids[index], call.name, ""))
            fragment = call.arguments
        if fragment:
            deltas.append(ToolCallDelta(index, None, None, fragment))
    if not (reasoning or content or deltas):
        return None
    return MessageDelta(reasoning or None, content or None, tuple(deltas))


def _apply(parsed: Parsed, delta: MessageDelta) -> Parsed:
    """``parsed`` plus ``delta`` (used when the stream itself adds a closing fragment)."""
    calls = list(parsed.tool_calls)
    for d in delta.tool_calls:
        old = calls[d.index]
        calls[d.index] = ToolCallPart(old.name, old.arguments + d.arguments, old.complete)
    return Parsed(
        parsed.reasoning + (delta.reasoning or ""),
        parsed.content + (delta.content or ""),
        tuple(calls),
        parsed.tool_call_ids,
    )


class MessageStream:
    """One request's message, fed with generated text; yields OpenAI deltas.

    ``tool_names``: when given, calls to other names are dropped (never streamed, listed
    in ``dropped``). Calls are streamed only once their name is complete and validated.
    ``streaming=False`` (non-streamed requests): :meth:`feed` only collects text and
    returns None; :meth:`finish` parses once, so the parsers' final verdict on malformed
    calls applies (and nothing is re-parsed per chunk).
    """

    def __init__(
        self,
        *,
        tool_parser: ToolParser | None,
        reasoning_parser: ReasoningParser | None,
        tool_names: Collection[str] | None = None,
        id_factory: Callable[[], str] = new_tool_call_id,
        streaming: bool = True,
        guard_repeats: bool = False,
    ) -> None:
        self._tool_parser = tool_parser
        self._reasoning_parser = reasoning_parser
        self._tool_names = None if tool_names is None else frozenset(tool_names)
        self._id_factory = id_factory
        self._text = ""
        self._sent = Parsed("", "")
        self._ids: list[str] = []
        self._dropped: tuple[str, ...] = ()
        self._parse_errors: tuple[str, ...] = ()
        self._stream_errors: list[str] = []
        self._frozen = False
        self._finished = False
        self._streaming = streaming
        self._guard = guard_repeats and tool_parser is not None
        self._repeat: str | None = None  # set once a duplicate call ended the turn
        self._parsed_args: dict[str, object] = {}  # arguments text -> JSON value (parsed once, not per token)
        self._scan_cache = ScanCache()  # makes re-parsing the growing text cheap

    @property
    def text(self) -> str:
        """All generated text fed so far."""
        return self._text

    @property
    def repeat(self) -> str | None:
        """Why the turn ended at a duplicate call (None while it has not)."""
        return self._repeat

    @property
    def parsed(self) -> Parsed:
        """What the deltas returned so far add up to."""
        return self._sent

    def feed(self, text_delta: str) -> MessageDelta | None:
        """Add generated text; the delta to send (None when nothing can be sent yet)."""
        if self._finished:
            raise RuntimeError("MessageStream.feed() after finish()")
        if not text_delta or self._repeat is not None:  # after a repeat, the turn is over
            return None
        self._text += text_delta
        if not self._streaming:
            if self._guard:  # a non-streamed turn also ends at its first repeat
                self._parse(final=False)
            return None
        return self._advance(final=False)

    def finish(self, text_delta: str = "") -> MessageDelta | None:
        """Add the last text (if any), parse for the last time and flush held-back text.

        For a non-streamed request call only this, with the whole text.
        """
        if self._finished:
            raise RuntimeError("MessageStream.finish() called twice")
        if self._repeat is None:
            self._text += text_delta
        self._finished = True
        delta = self._advance(final=True)
        # A call the stream could not complete (see module docstring) still ends as
        # valid-looking "{}" when no argument text was sent at all.
        closing = tuple(
            ToolCallDelta(i, None, None, "{}")
            for i, call in enumerate(self._sent.tool_calls)
            if call.name is not None and call.arguments == ""
        )
        if closing:
            extra = MessageDelta(tool_calls=closing)
            self._sent = _apply(self._sent, extra)
            if delta is None:
                return extra
            return MessageDelta(delta.reasoning, delta.content, delta.tool_calls + closing)
        return delta

    def final_message(self) -> FinalMessage:
        """The whole message; equal to the concatenation of every delta returned."""
        sent = self._sent
        calls = [
            FinalToolCall(sent.tool_call_ids[i], call.name, call.arguments or "{}")
            for i, call in enumerate(sent.tool_calls)
            if call.name is not None
        ]
        return FinalMessage(
            reasoning=sent.reasoning or None,
            content=sent.content or None,
            tool_calls=calls,
            dropped=list(self._dropped),
            errors=list(self._parse_errors) + self._stream_errors,
            repeated=[self._repeat] if self._repeat else [],
        )

    def _new_id(self) -> str:
        for _ in range(100):
            new = self._id_factory()
            if new not in self._ids:
                return new
        raise RuntimeError("the tool-call id factory keeps returning ids already used")

    def _advance(self, *, final: bool) -> MessageDelta | None:
        if self._frozen and not final:
            return None
        current = self._parse(final=final)  # when frozen: only for the final errors
        if self._frozen:
            return None
        try:
            delta = compute_deltas(self._sent, current)
        except StreamRetractionError as exc:
            self._frozen = True
            self._stream_errors.append(f"stopped streaming: {exc}")
            return None
        self._sent = current
        return delta

    def _parse(self, *, final: bool) -> Parsed:
        if self._reasoning_parser is not None:
            reasoning, rest = self._reasoning_parser.split(self._text, final=final)
        else:
            reasoning, rest = "", self._text
        if self._tool_parser is None:
            return Parsed(reasoning, rest)
        with self._scan_cache.active():
            result = self._tool_parser.parse(rest, final=final)
        self._parse_errors = result.errors
        kept: list[ToolCallPart] = []
        dropped: list[str] = []
        for call in result.tool_calls:
            if call.name is None:
                break  # still being written; later calls cannot have started
            if not call.complete and call.arguments == "":
                # Not streamed before its arguments start: a call cut right after its name
                # must never reach a client as a complete-looking f({}).
                break
            if self._tool_names is not None and call.name not in self._tool_names:
                dropped.append(
                    f"tool call to unknown function {call.name!r} dropped; "
                    f"the request's tools are: {', '.join(sorted(self._tool_names)) or '(none)'}"
                )
                continue
            kept.append(call)
        self._dropped = tuple(dropped)
        if self._guard:
            kept = self._without_repeats(kept)
        while len(self._ids) < len(kept):
            self._ids.append(self._new_id())
        return Parsed(reasoning, result.content, tuple(kept), tuple(self._ids[: len(kept)]))

    def _without_repeats(self, calls: list[ToolCallPart]) -> list[ToolCallPart]:
        """``calls`` up to the first repeat (which ends the turn), holding back an unfinished
        call to a function already called (it may turn out to be a repeat)."""
        seen: list[tuple[str, object]] = []
        for i, call in enumerate(calls):
            earlier = [args for name, args in seen if name == call.name]
            if not call.complete:
                return calls[:i] if earlier else calls
            args = self._parsed_args.get(call.arguments)
            if args is None:
                args = self._parsed_args[call.arguments] = _arguments_value(call.arguments)
            if any(args == other for other in earlier):
                if self._repeat is None:
                    self._repeat = (f"tool call {i} repeats an earlier call to {call.name!r} with the same "
                                    "arguments; the turn ended there (the model was looping)")
                return calls[:i]
            seen.append((call.name or "", args))
        return calls


def _arguments_value(arguments: str) -> object:
    """Arguments as parsed JSON for comparison ("" is {}); unparsable text compares as text."""
    try:
        return json.loads(arguments or "{}")
    except ValueError:
        return arguments
