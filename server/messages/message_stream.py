"""From generated text to OpenAI message deltas, and the final message.

:func:`compute_deltas` is the only code that knows the OpenAI streaming rules:

* reasoning and content only grow; a delta carries the new suffix;
* per tool-call index, the first delta carries ``index``, ``id``, ``type="function"``,
  ``name`` and ``arguments: ""``; later deltas carry only argument fragments;
* indexes only grow (a call is never retracted or renamed).

:class:`MessageStream` (one per request) parses on each feed (reasoning split, then tool
parse on the rest), filters calls, assigns ids, and diffs against what was already sent.
Concatenating every delta gives exactly :meth:`MessageStream.final_message`. Parsers stay
pure functions of the text; the stream keeps only the text after their last checkpoint
(see :class:`~tool_parsers.base.Checkpoint`), so the work per token stays flat however long
the output grows (``bench/parse_cost.py`` measures it).

Repeats: with ``guard_repeats``, a complete call identical to an earlier call of the same
turn (same name, arguments equal as parsed JSON) means the model is looping: the turn ends
before it, the duplicate is never returned or streamed (a later call to an already-called
function is held back until complete, then released or dropped), everything generated
after it is ignored, and :attr:`MessageStream.repeat` says why.

Conflicts: a parser may learn late that a call whose name was already streamed is
malformed (invalid JSON after the name, or the text ends inside it). Sent deltas cannot be
taken back, so the stream keeps what it sent (the call, with the argument text sent so far)
and, once the parser says where the malformed region ends (its end marker, or the next call
marker), parses on after it: later calls and text reach the client as they do non-streamed.
The text inside that region is not sent. ``FinalMessage.errors`` says "kept as written".

The rule for a call that breaks or never completes (docs/tool_calling.md, "the rule for an
unfinished call"): it is kept as far as it was written well. Where a parse first shows a
malformed region, the stream finds the longest prefix of the text at which the call was still
open and well formed (a search over prefixes, only when a call breaks) and sends that parse
first: the call's name and its arguments up to the break, whatever the chunking. If the call
had a name and its arguments had begun there, it stays in the message (``complete`` False,
listed in ``FinalMessage.unfinished``); otherwise the parser's verdict stands (its text is
content). A non-streamed request runs the same steps over the whole text (a non-final parse,
then the final one), so streamed and non-streamed answers agree under every chunking.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from server.json_types import JsonValue
from server.messages.call_head import CallHead, call_head, grammar_heads
from server.messages.deltas import (
    FinalMessage,
    FinalToolCall,
    MessageDelta,
    Parsed,
    StreamRetractionError,
    ToolCallDelta,
    apply_delta,
    compute_deltas,
    merge_deltas,
    new_tool_call_id,
)
from server.messages.repeats import RepeatCheck
from tool_parsers._content import AFTER_CALL
from tool_parsers.base import Checkpoint, OpenValue, ScanCache, ToolCallPart, ToolParser

if TYPE_CHECKING:  # a type only: reasoning parsers may come to import tool_parsers
    from reasoning_parsers.base import ReasoningParser

__all__ = ["Parsed", "ToolCallDelta", "MessageDelta", "FinalToolCall", "FinalMessage", "StreamRetractionError",
           "compute_deltas", "new_tool_call_id", "MessageStream"]

FAST_ARGUMENTS = True  # tests turn it off to compare every delta with the parsing path
# Chunks sent without a parse; tests turn each off to compare with a parse of every chunk:
SKIP_HELD = True  # ToolParser.held_inert
SKIP_WAIT = True  # ParsedTools.wait
SKIP_HEAD = True  # CallHead (server/messages/call_head.py)
SKIP_CONTENT = True  # ToolParser.prose_inert
SKIP_REASONING = True  # ReasoningParser.inert
_BLANK = " \t\n\r"  # JSON's whitespace (ParsedTools.wait's blank_first)
_SETTLE_AFTER = 256  # re-read at most about this much settled text per step (settling has a cost too)


@dataclass
class _Settled:
    """What lies before the stream's checkpoint: sent, final, never parsed again."""

    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    calls: list[ToolCallPart] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


class MessageStream:
    """One request's message, fed with generated text; yields OpenAI deltas.

    ``tool_names``: when given, calls to other names are dropped (never streamed, listed
    in ``dropped``). ``early_names``: a call's name is sent as soon as it is complete, its
    arguments in later deltas, as OpenAI streams (only where a grammar ends every call it opens:
    otherwise a call is sent once its arguments begin, see the module doc). ``grammar_names``
    (with ``early_names``): the names that grammar lets a call take; where it writes each call's head
    exactly (``call_head.grammar_heads``), a name goes out as soon as the head written so far fits
    one of them only, before it is whole. ``tool_schemas``
    (name -> parameters) reach the parser (see :meth:`~tool_parsers.base.ToolParser.with_tools`).
    Calls are streamed only once their name is known (whole, or the one the grammar leaves) and allowed.
    ``streaming=False`` (non-streamed requests): :meth:`feed` only collects text and
    returns None; :meth:`finish` parses the whole text once, so the parsers' final verdict
    on malformed calls applies.

    Cost: each feed parses only the text after the last checkpoint (the reasoning parser's
    settled point, then the tool parser's :class:`~tool_parsers.base.Checkpoint`), JSON scans
    resume where they stopped (:class:`ScanCache`), and chunks that cannot change the parse are
    not parsed (the ``SKIP_*`` rules), so the work per token does not grow with the output.
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
        tool_schemas: Mapping[str, JsonValue] | None = None,
        early_names: bool = False,
        grammar_names: Collection[str] | None = None,
    ) -> None:
        if tool_parser is not None and tool_schemas is not None:
            tool_parser = tool_parser.with_tools(tool_schemas)  # XML parameters are typed by schema
        self._tool_parser = tool_parser
        self._prose_inert = tool_parser.prose_inert() if tool_parser is not None else None
        self._reasoning_inert = reasoning_parser.inert() if reasoning_parser is not None else None
        self._held_inert = tool_parser.held_inert if tool_parser is not None else None
        self._start_marker = tool_parser.start if tool_parser is not None else None
        self._reasoning_parser = reasoning_parser
        self._tool_names = None if tool_names is None else frozenset(tool_names)
        self._id_factory = id_factory
        self._streaming = streaming
        self._guard = guard_repeats and tool_parser is not None
        self._early_names = early_names
        # (name, head) of each name the grammar allows, where a call's name is known from its head
        self._heads = grammar_heads(tool_parser, grammar_names) if tool_parser and early_names and grammar_names else ()
        self._chunks: list[str] = []
        self._ids: list[str] = []
        self._finished = False
        self._repeat: str | None = None  # set once a duplicate call ended the turn
        self._repeats = RepeatCheck()  # the repeat guard's record (its parsed arguments kept across restarts)
        self._start("")

    def _start(self, text: str) -> None:
        """(Re)start parsing at the beginning of the output, with ``text``."""
        self._done = _Settled()
        self._sent = Parsed("", "")  # what was sent after the checkpoint (same origin as a parse)
        self._in_reasoning = self._reasoning_parser is not None
        self._reasoning_text = text if self._in_reasoning else ""  # reasoning parser's input after its checkpoint
        self._inside = False  # that input starts within the reasoning block
        self._reasoning = ""  # the reasoning once the block ended
        self._tail = "" if self._in_reasoning else text  # tool parser's input after its checkpoint
        self._resume: str | None = None
        self._grown = False
        self._reasoning_settled: int | None = None
        self._reasoning_open = False  # the last parse read all the reasoning text: none held back (_in_open_reasoning)
        self._bad: tuple[tuple[int, int | None], ...] = ()  # malformed regions in the last parse
        self._known_bad: frozenset[int] = frozenset()  # their starts when it was sent
        self._frozen = False
        self._stream_errors: list[str] = []
        self._tail_errors: tuple[str, ...] = ()
        self._sent_errors = 0  # how many of those the last parse sent had
        self._tail_dropped: tuple[str, ...] = ()
        self._scan_cache = ScanCache()
        self._open_arguments = False  # the last call sent is open inside its arguments: see _extend_arguments
        self._open_value = OpenValue()  # the open arguments' JSON scan, resumed token by token
        self._guard_held: str | None = None  # the arguments of an open call the repeat guard holds back
        self._synced = False  # what was sent is the last parse of the whole tail
        self._headed: set[int] = set()  # malformed regions whose well-formed head was already sent
        self._held = False  # the last parse ends in a call with nothing to send yet (see feed)
        self._wait: tuple[int, str, bool] | None = None  # the last parse's held marker start (ParsedTools.wait)
        self._head: CallHead | None = None  # the head of the call begun at the last whole start marker
        self._fresh = False  # the last parse read all the text and was sent (finish need not parse it again)
        self._prose = False  # the last parse found no call and no malformed region and ends in content (_in_prose)
        self._repeats.restart()  # (the settled calls it read are read again)

    @property
    def text(self) -> str:
        """All generated text fed so far."""
        return "".join(self._chunks)

    @property
    def repeat(self) -> str | None:
        """Why the turn ended at a duplicate call (None while it has not)."""
        return self._repeat

    @property
    def parsed(self) -> Parsed:
        """What the deltas returned so far add up to."""
        done, sent = self._done, self._sent
        calls = tuple(done.calls) + sent.tool_calls
        return Parsed("".join(done.reasoning) + sent.reasoning, "".join(done.content) + sent.content,
                      calls, tuple(self._ids[: len(calls)]))

    def feed(self, text_delta: str) -> MessageDelta | None:
        """Add generated text; the delta to send (None when nothing can be sent yet)."""
        if self._finished:
            raise RuntimeError("MessageStream.feed() after finish()")
        if not text_delta or self._repeat is not None:  # after a repeat, the turn is over
            return None
        self._chunks.append(text_delta)
        if not self._streaming and not self._guard:
            return None
        if self._tool_parser is None and not self._in_reasoning and not self._frozen:
            # Nothing left to parse: all further text is content, sent as it comes.
            if self._sent.content:  # (the text after the reasoning block, sent by the last parse)
                self._done.content.append(self._sent.content)
                self._sent, self._tail = Parsed(self._sent.reasoning, ""), ""
            self._done.content.append(text_delta)
            return MessageDelta(None, text_delta, ()) if self._streaming else None
        self._append(text_delta)
        if self._in_reasoning:
            if self._synced and SKIP_REASONING and self._in_open_reasoning(text_delta):
                self._sent = Parsed(self._sent.reasoning + text_delta, "")  # (no content inside the block)
                return MessageDelta(text_delta, None, ()) if self._streaming else None
        elif self._synced:
            head = self._head
            naming = False  # the grammar leaves the call in the head one name: the parse below sends it
            if head is not None and SKIP_HEAD and head.holds(self._tail, self._held_inert):
                if not (self._heads and head.forced_name(self._tail, self._heads)):
                    return None  # a call's head being written as its family writes it: nothing to send yet
                naming = True
            if self._held and SKIP_HELD and not naming:
                inert = self._held_inert
                if inert is not None and inert.fullmatch(text_delta):
                    return None  # nothing of the held call can be sent after this chunk: the next parse reads it
            wait = self._wait
            if wait is not None and SKIP_WAIT and (text_delta in wait[1] or (wait[2] and text_delta.isspace())):
                rest = self._tail[wait[0]:].lstrip(_BLANK) if wait[2] else self._tail[wait[0]:]
                if len(rest) < len(wait[1]) and wait[1].startswith(rest):
                    return None  # a marker still being written: the parse would be the last one (ParsedTools.wait)
                if rest == wait[1] == self._start_marker:  # a call's start, whole: nothing of it to send yet
                    self._wait, self._prose = None, False  # (so the next chunk is parsed, unless in the head)
                    assert self._tool_parser is not None
                    self._head = call_head(self._tool_parser, len(self._tail) - len(rest))
                    if not (self._heads and self._head and self._head.forced_name(self._tail, self._heads)):
                        return None  # (else one name fits already: the parse below sends it)
            elif wait is None and SKIP_CONTENT and self._in_prose(text_delta):
                sent = self._sent
                self._sent = Parsed(sent.reasoning, sent.content + text_delta, (), ())
                return MessageDelta(None, text_delta, ()) if self._streaming else None
        if (self._guard_held is not None and FAST_ARGUMENTS and self._synced and not self._frozen
                and (grown := self._open_value.grow(self._guard_held, text_delta)) is not None):
            self._guard_held = grown  # the call the repeat guard holds is still open: a parse would hold it again
            return None
        delta = self._extend_arguments(text_delta) if self._open_arguments and FAST_ARGUMENTS else None
        if delta is None:
            delta = self._advance(final=False)  # non-streamed with the guard: a turn also ends at its first repeat
            self._open_arguments = self._open_call_arguments()
        return delta if self._streaming else None

    def finish(self, text_delta: str = "") -> MessageDelta | None:
        """Add the last text (if any), parse for the last time and flush held-back text.

        For a non-streamed request call only this, with the whole text.
        """
        if self._finished:
            raise RuntimeError("MessageStream.finish() called twice")
        if self._repeat is None and text_delta:
            self._chunks.append(text_delta)
            self._append(text_delta)
        self._finished = True
        if not self._streaming:  # the whole text as one chunk: what a stream of it would send
            self._start(self.text)
        # The text as a stream sees it (a call the text ends inside is open), then the final
        # verdict: a call the final parse rejects only because the text ended stays as written.
        delta = merge_deltas(None if self._fresh else self._advance(final=False), self._advance(final=True))
        # A call the stream could not complete (see module docstring) still ends as
        # valid-looking "{}" when no argument text was sent at all: a call still being parsed, or
        # one settled when the parse resumed after it (its name went out before it broke).
        first = len(self._done.calls)
        every = [*self._done.calls, *self._sent.tool_calls]
        closing = tuple(ToolCallDelta(i, None, None, "{}") for i, call in enumerate(every)
                        if call.name is not None and call.arguments == "")
        if closing:
            for d in closing:
                if d.index < first:
                    done = self._done.calls[d.index]
                    self._done.calls[d.index] = ToolCallPart(done.name, "{}", done.complete)
            self._sent = apply_delta(self._sent, MessageDelta(tool_calls=tuple(d for d in closing if d.index >= first)),
                                     first)
            if delta is None:
                return MessageDelta(tool_calls=closing)
            return MessageDelta(delta.reasoning, delta.content, delta.tool_calls + closing)
        return delta

    def final_message(self) -> FinalMessage:
        """The whole message; equal to the concatenation of every delta returned."""
        sent = self.parsed
        named = [(i, call) for i, call in enumerate(sent.tool_calls) if call.name is not None]
        calls = [FinalToolCall(sent.tool_call_ids[i], call.name or "", call.arguments or "{}") for i, call in named]
        return FinalMessage(
            reasoning=sent.reasoning or None,
            content=sent.content or None,
            tool_calls=calls,
            dropped=self._done.dropped + list(self._tail_dropped),
            errors=self._done.errors + list(self._tail_errors) + self._stream_errors,
            repeated=[self._repeat] if self._repeat else [],
            unfinished=[k for k, (_, call) in enumerate(named) if not call.complete],
        )

    def _in_prose(self, text: str) -> bool:
        """Whether ``text`` only extends content: the last parse (sent) found no call, not even a dropped
        one, and no malformed region, and ends in content with text (a blank run alone is held), and
        ``text`` cannot begin a call (``ToolParser.prose_inert``). A parse every ``2 * _SETTLE_AFTER``
        characters still settles the text."""
        sent = self._sent
        inert = self._prose_inert
        return (inert is not None and self._prose and not self._frozen and sent.content != ""
                and len(self._tail) < 2 * _SETTLE_AFTER and inert.fullmatch(text) is not None)

    def _in_open_reasoning(self, text: str) -> bool:
        """Whether ``text`` only extends the reasoning (as :meth:`_in_prose` the content): the last parse
        is inside the block, with reasoning and nothing held back, and ``ReasoningParser.inert`` says so."""
        inert = self._reasoning_inert
        return (inert is not None and self._reasoning_open and not self._frozen and self._sent.reasoning != ""
                and len(self._reasoning_text) < 2 * _SETTLE_AFTER and inert.fullmatch(text) is not None)

    def _open_call_arguments(self) -> bool:
        """Whether the last call sent is open, streamed, and its text ends inside its arguments
        value (an object or array: arguments written as a JSON string are held till complete)."""
        sent = self._sent
        if (not self._synced or self._frozen or self._in_reasoning or self._repeat is not None
                or not sent.tool_calls):
            return False  # (not synced: the last parse was not sent, e.g. a call broke and is held)
        call = sent.tool_calls[-1]
        return (not call.complete and call.name is not None and call.arguments[:1] in ("{", "[")
                and self._tool_parser is not None and self._tool_parser.raw_arguments)

    def _extend_arguments(self, text: str) -> MessageDelta | None:
        """The open call's arguments grow by ``text`` when its JSON value is still open after it: what
        parsing the tail again would give (every family returns an open call's arguments as the raw
        text from the value's start, checked by the same JSON scan), without the parse. None: the
        value ends in ``text`` or breaks there, so the parser must see it (tests compare every delta)."""
        sent = self._sent
        call = sent.tool_calls[-1]
        if (grown := self._open_value.grow(call.arguments, text)) is None:
            return None
        self._sent = Parsed(sent.reasoning, sent.content, sent.tool_calls[:-1] + (ToolCallPart(call.name, grown, False),),
                            sent.tool_call_ids)
        index = len(self._done.calls) + len(sent.tool_calls) - 1
        return MessageDelta(None, None, (ToolCallDelta(index, None, None, text),))

    def _append(self, text: str) -> None:
        self._fresh = False
        if self._in_reasoning:
            self._reasoning_text += text
        else:
            self._tail += text
            self._grown = True

    def _new_id(self) -> str:
        for _ in range(100):
            new = self._id_factory()
            if new not in self._ids:
                return new
        raise RuntimeError("the tool-call id factory keeps returning ids already used")

    def _advance(self, *, final: bool) -> MessageDelta | None:
        self._synced = False  # until this parse is what was sent (see _open_call_arguments)
        if self._frozen and not final:
            return None
        head: MessageDelta | None = None  # what broken calls' well-formed heads added
        for _ in range(100):  # each retry starts after another malformed call
            current, checkpoint = self._parse(final=final)
            if self._frozen:
                return head
            head = merge_deltas(head, self._head_of_broken_call())
            try:
                delta = compute_deltas(self._sent, current, first_index=len(self._done.calls))
            except StreamRetractionError as exc:
                if self._resume_after_malformed(exc, final=final):
                    continue
                return head
            self._sent, self._synced, self._fresh = current, True, not final
            self._sent_errors = len(self._tail_errors)
            if self._bad or self._known_bad:
                self._known_bad = frozenset(start for start, _ in self._bad)
            if self._in_reasoning and (self._reasoning_settled or 0) >= _SETTLE_AFTER:  # all reasoning so far is final
                self._done.reasoning.append(current.reasoning)
                self._sent = Parsed("", "")
                self._reasoning_text, self._inside = self._reasoning_text[self._reasoning_settled :], True
            elif checkpoint is not None and (checkpoint[0].pos >= _SETTLE_AFTER or checkpoint[1]) and self._repeat is None:
                # (complete calls settle at once: a turn of short calls is not re-read call by call)
                self._settle(*checkpoint)
            return merge_deltas(head, delta)
        raise RuntimeError("too many malformed tool calls in one step")

    def _head_of_broken_call(self) -> MessageDelta | None:
        """When the last parse shows a malformed region not seen before, send what the text held
        up to where the call broke (the longest prefix whose non-final parse does not show the
        region): its name and its arguments so far, if they had begun. So a stream sends the same
        head of a broken call whatever its chunking, and a non-streamed answer the same again.
        A search over prefixes (about log2 of the tail's length parses), only when a call breaks."""
        region = next((r for r in self._bad if r[0] not in self._known_bad and r[0] not in self._headed), None)
        if region is None or self._tool_parser is None or self._in_reasoning:
            return None
        start, tail = region[0], self._tail
        self._headed.add(start)
        lo, hi = start, len(tail)  # not broken at lo; broken at hi unless the text only ended inside it
        if self._broken_at(hi, start):
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self._broken_at(mid, start):
                    hi = mid
                else:
                    lo = mid
        else:
            lo = hi
        head, _ = self._tool_view(tail[:lo], final=False)
        calls = head.tool_calls
        if not calls or calls[-1].complete or len(calls) < len(self._sent.tool_calls):
            return None  # the call broke before its name and arguments could be sent: the verdict stands
        try:
            delta = compute_deltas(self._sent, head, first_index=len(self._done.calls))
        except StreamRetractionError:
            return None
        self._sent = head  # (not synced: the parse of the whole tail still differs)
        return delta

    def _broken_at(self, end: int, start: int) -> bool:
        """Whether the non-final parse of ``tail[:end]`` shows the malformed region at ``start``."""
        assert self._tool_parser is not None
        text = self._tail[:end]
        if self._resume is None:
            result = self._tool_parser.parse(text, final=False)
        else:
            result = self._tool_parser.parse(text, final=False, resume=self._resume)
        return any(s == start for s, _ in result.malformed)

    def _parse(self, *, final: bool) -> tuple[Parsed, tuple[Checkpoint, int, tuple[str, ...]] | None]:
        """The parse of the text after the checkpoint, and the tool parser's new checkpoint
        (with how many of the parse's calls it settles and the dropped-call notes it settles)."""
        if self._in_reasoning:
            assert self._reasoning_parser is not None
            reasoning, rest, settled = self._reasoning_parser.split_at(
                self._reasoning_text, final=final, inside=self._inside)
            if not (rest or final):
                self._reasoning_settled = settled
                self._reasoning_open = settled == len(self._reasoning_text)
                return Parsed(reasoning, ""), None
            self._in_reasoning, self._reasoning, self._tail, self._grown = False, reasoning, rest, False
        if self._tool_parser is None:
            n = len(self._tail)
            return Parsed(self._reasoning, self._tail), (Checkpoint(n, n, 0, 0), 0, ()) if n >= _SETTLE_AFTER else None
        with self._scan_cache.active(grown=self._grown):
            parsed, cp = self._tool_view(self._tail, final=final, record=True)
        self._grown = False
        return parsed, cp

    def _tool_view(self, text: str, *, final: bool, record: bool = False,
                   ) -> tuple[Parsed, tuple[Checkpoint, int, tuple[str, ...]] | None]:
        """The tool parser's parse of ``text`` (the tail, or a prefix of it), filtered as the
        client sees it: calls named, allowed and not repeats, with their ids. ``record``: it is
        the parse of the whole tail (its errors, malformed regions and dropped calls are kept)."""
        assert self._tool_parser is not None
        reasoning = self._reasoning
        if self._resume is None:  # (a parser without checkpoints need not know ``resume``)
            result = self._tool_parser.parse(text, final=final)
        else:
            result = self._tool_parser.parse(text, final=final, resume=self._resume)
        calls = result.tool_calls
        if record:
            self._tail_errors = result.errors
            self._bad = result.malformed
            self._wait = result.wait
            self._prose = result.prose_end and not result.tool_calls and not result.malformed
            last_call = result.tool_calls[-1] if result.tool_calls else None
            self._held = (last_call is not None and not last_call.complete
                          and (last_call.name is None or last_call.arguments == ""))
            head = self._head if self._held and not result.malformed else None
            if head is not None and last_call is not None and last_call.name is not None:
                head = head.with_name(text, last_call.name)
            elif self._heads and self._held and last_call is not None and not result.malformed:
                # (a head found at the last start marker where the stream has none: a non-streamed
                # answer, a chunk that held the marker and more, names the call as a stream would)
                at = text.rfind(self._start_marker or "\0") if head is None else -1
                head = head if head is not None or at < 0 else call_head(self._tool_parser, at)
                forced = head.forced_name(text, self._heads) if head is not None else None
                if forced is not None:  # the grammar leaves this call one name: it is the call's name now
                    head = forced[1]
                    calls = calls[:-1] + (ToolCallPart(forced[0], last_call.arguments, False),)
            self._head = head
        kept: list[ToolCallPart] = []
        dropped: list[str] = []
        cp = result.checkpoint
        settled_kept, settled_dropped = 0, 0
        for i, call in enumerate(calls):
            if cp is not None and i == cp.calls:
                settled_kept, settled_dropped = len(kept), len(dropped)
            if call.name is None:
                break  # still being written; later calls cannot have started
            if not call.complete and call.arguments == "" and not self._early_names:
                # Not streamed before its arguments start: a call cut right after its name
                # must never reach a client as a complete-looking f({}). (``early_names``: the
                # grammar ends every call it opens, so the name goes out as soon as it is whole.)
                break
            if self._tool_names is not None and call.name not in self._tool_names:
                dropped.append(
                    f"tool call to unknown function {call.name!r} dropped; "
                    f"the request's tools are: {', '.join(sorted(self._tool_names)) or '(none)'}"
                )
                continue
            kept.append(call)
        else:
            if cp is not None and cp.calls == len(calls):
                settled_kept, settled_dropped = len(kept), len(dropped)
        if record:
            self._tail_dropped = tuple(dropped)
        first = len(self._done.calls)
        if self._guard:
            named = kept
            kept = self._repeats.kept(kept, self._done.calls)
            self._repeat = self._repeat or self._repeats.repeat
            if record:  # an open call to a function already called, held till it is whole (see feed)
                last = named[-1] if len(kept) == len(named) - 1 else None
                self._guard_held = (last.arguments if last is not None and last is calls[-1]
                                    and not last.complete and last.arguments[:1] in ("{", "[")
                                    and self._tool_parser.raw_arguments and not result.malformed else None)
        while len(self._ids) < first + len(kept):
            self._ids.append(self._new_id())
        parsed = Parsed(reasoning + result.reasoning, result.content, tuple(kept),
                        tuple(self._ids[first : first + len(kept)]))
        if cp is None or cp.pos == 0 or settled_kept > len(kept):
            return parsed, None
        return parsed, (cp, settled_kept, tuple(dropped[:settled_dropped]))

    def _settle(self, cp: Checkpoint, calls: int, dropped: tuple[str, ...]) -> None:
        """Move what the checkpoint settles out of the parsed text: it is never parsed again."""
        sent, done = self._sent, self._done
        if cp.content:
            done.content.append(sent.content[: cp.content])
        if cp.reasoning:  # reasoning the tool parser found (after the reasoning parser's, if any)
            k = len(self._reasoning) + cp.reasoning
            done.reasoning.append(sent.reasoning[:k])
            sent, self._reasoning = Parsed(sent.reasoning[k:], sent.content, sent.tool_calls, sent.tool_call_ids), ""
        done.calls.extend(sent.tool_calls[:calls])
        done.errors.extend(self._tail_errors[: cp.errors])
        done.dropped.extend(dropped)
        self._tail_errors = self._tail_errors[cp.errors :]
        self._sent_errors = len(self._tail_errors)
        self._tail_dropped = self._tail_dropped[len(dropped) :]
        self._sent = Parsed(sent.reasoning, sent.content[cp.content :], sent.tool_calls[calls:],
                            sent.tool_call_ids[calls:])
        self._tail, self._resume = self._tail[cp.pos :], cp.resume
        self._head = None if self._head is None else self._head.shifted(cp.pos)
        wait = self._wait
        self._wait = None if wait is None or wait[0] < cp.pos else (wait[0] - cp.pos, *wait[1:])
        self._known_bad = frozenset(start - cp.pos for start, _ in self._bad if start >= cp.pos)
        self._headed = {start - cp.pos for start in self._headed if start >= cp.pos}
        self._scan_cache.clear()

    def _resume_after_malformed(self, exc: StreamRetractionError, *, final: bool) -> bool:
        """A call already (partly) sent turned out malformed: what was sent stays, parsing
        resumes after the malformed region. False when that is not possible (yet)."""
        region = next((r for r in self._bad if r[0] not in self._known_bad), None)
        if region is not None and region[1] is None and not final:
            return False  # the region is still open: nothing after it to send yet
        if region is None or region[1] is None:
            self._frozen = True
            if final and self._tail_errors and len(self._tail_errors) > self._sent_errors:
                # the output ended inside the call: one error for it, the call kept as written
                last = self._tail_errors[-1].replace("kept as content", "kept as written")
                self._tail_errors = self._tail_errors[:-1] + (f"{last} (the output ended inside it)",)
            else:
                self._stream_errors.append(f"stopped streaming: {exc}")
            return False
        sent, done = self._sent, self._done
        done.reasoning.append(sent.reasoning)
        self._reasoning = ""
        done.content.append(sent.content)
        done.calls.extend(sent.tool_calls)
        # The parser's errors up to this region's (the one after those of the last parse sent),
        # so each malformed call is still one error; later ones come again from the next parse.
        n = self._sent_errors
        errors = list(self._tail_errors[: n + 1])
        note = f"the call is kept as far as it was written well ({exc}), parsing resumed after it"
        if len(errors) > n:
            errors[n] = f"{errors[n].replace('kept as content', 'kept as written')}; {note}"
        else:
            errors.append(note)
        done.errors.extend(errors)
        done.dropped.extend(self._tail_dropped)
        self._tail_errors, self._tail_dropped, self._sent_errors = (), (), 0
        self._sent = Parsed("", "")
        self._tail, self._resume = self._tail[region[1] :], AFTER_CALL
        self._head = None
        self._known_bad = frozenset()
        self._headed = set()
        self._scan_cache.clear()
        return True
