"""Lanes: a streamed choice's per-token path straight from the engine's chunks to the response.

The run loop (:mod:`server.plan.run`) makes one update per chunk, which the framer frames, the
stream guard passes on and the response writes: five generators per token where the transport
floor has two. Once a choice is under way, the run yields a lane instead: the framer turns it into
a generator of framed events (``events``) and yields that, and the response iterates it itself
while the run, framer and guard wait (``server.chat.sse.Events``). A lane takes only the chunks
whose whole effect is one event of a known kind; the first chunk that does anything more (the
finish, logprobs, a repeated call, a delta of another kind) is handed back to the run as
``pending``, and an engine failure as ``error``, and the run takes them as if the lane had not
been. Each kind of lane frames byte for byte what the general path frames (tested with the
framers' ``FAST_PATHS`` off).

- :class:`TextLane`: a choice with nothing to parse (no call format, no reasoning parser): its
  text, fed to its stream once when the lane stops.
- :class:`ParsedLane`: a choice whose text is parsed (a call format or a reasoning parser in
  play): each chunk is fed to its stream as the run would feed it, and the delta goes out when it is
  the choice's next content or its open call's next arguments fragment.

Per request; the run reads ``pending`` and ``error`` once ``events`` has ended.
"""
from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Protocol

from server.chat.generation import GenerationTimer
from server.engine.base import TokenChunk
from server.messages.message_stream import MessageDelta, MessageStream

__all__ = ["ArgumentsFrame", "Lane", "ParsedLane", "TextFrame", "TextLane", "lane_delta"]

TextFrame = Callable[[int, str], bytes]  # (choice index, text): the event
ArgumentsFrame = Callable[[int, int, str], bytes]  # (choice index, call index, arguments fragment): the event, or b""


class Choice(Protocol):
    """What a lane reads and brings up to date of its choice (``server.plan.run.Choice``, which imports
    this module)."""

    index: int
    unparsed: bool
    stream: MessageStream | None
    tokens: int
    text: str


def lane_delta(delta: MessageDelta) -> bool:
    """Whether ``delta`` is one a :class:`ParsedLane` frames: content alone, or one arguments
    fragment of a call already named (what the framers' per-token fast paths frame)."""
    if delta.reasoning:
        return False
    calls = delta.tool_calls
    if not calls:
        return bool(delta.content)
    return not delta.content and len(calls) == 1 and calls[0].name is None


class Lane:
    """What the kinds of lanes share: the chunks, the choice, the stop check, the clock, and what is
    handed back. When each chunk with tokens came, and how many, goes to the request's timer in bulk
    (``GenerationTimer.on_stamps``) and to the choice's token count: a lane's chunk costs one call
    (:meth:`_stops`) for all that."""

    __slots__ = ("_chunks", "_choice", "_timer", "_stamps", "_counts", "pending", "error")

    def __init__(self, chunks: AsyncIterator[TokenChunk], choice: Choice, timer: GenerationTimer) -> None:
        self._chunks = chunks
        self._choice = choice
        self._timer = timer
        self._stamps: list[float] = []
        self._counts: list[int] = []
        self.pending: TokenChunk | None = None  # the chunk that stopped the lane, for the run to take
        self.error: Exception | None = None  # the engine's failure, for the run to raise where it maps them

    def _stops(self, c: TokenChunk) -> bool:
        """Whether chunk ``c`` stops the lane (kept as ``pending``: the finish, logprobs, a queue time, which
        do more than add text); else it is clocked."""
        if c.finish_reason is not None or c.logprobs or c.queue_seconds is not None:
            self.pending = c
            return True
        if (n := c.num_tokens) > 0:
            self._stamps.append(time.perf_counter())
            self._counts.append(n)
            if len(self._stamps) >= GenerationTimer.ITL_BATCH:  # (a scrape sees latencies as late as without lanes)
                self._flush()
        return False

    def _flush(self) -> None:
        self._timer.on_stamps(self._stamps, self._counts)
        self._choice.tokens += sum(self._counts)
        self._stamps, self._counts = [], []


class TextLane(Lane):
    """The lane of a streamed choice with nothing to parse (``Run.text_updates``): once it has sent
    its first delta, each further chunk of plain text goes out framed, and nothing else happens to it."""

    __slots__ = ("_keep_text",)

    def __init__(self, chunks: AsyncIterator[TokenChunk], choice: Choice, timer: GenerationTimer, *,
                 keep_text: bool) -> None:
        super().__init__(chunks, choice, timer)
        self._keep_text = keep_text  # a completions choice keeps its text (``Choice.text``), as ``Run._update`` does

    async def events(self, frame: TextFrame, *, empty: bool = False) -> AsyncGenerator[bytes, None]:
        """``frame(index, text)`` of each chunk's text (``empty``: of an empty one too, where the framer
        sends those), until the lane stops. The choice's stream (or text) and token count are brought up
        to date once, when it stops: with nothing to parse, the stream fed the lane's text at once holds
        what it would hold fed chunk by chunk."""
        ch = self._choice
        assert ch.unparsed
        texts: list[str] = []
        try:
            async for c in self._chunks:
                if self._stops(c):
                    return
                if (text := c.text) or empty:  # (chat: an empty chunk sends nothing)
                    texts.append(text)
                    yield frame(ch.index, text)
        except Exception as exc:  # noqa: BLE001 - the run raises it where it maps the engine's errors
            self.error = exc
        finally:
            self._flush()
            if texts and ch.stream is not None:
                ch.stream.feed("".join(texts))
            elif texts and self._keep_text:
                ch.text += "".join(texts)


class ParsedLane(Lane):
    """The lane of a streamed choice whose text is parsed (``Run.text_updates``): once it has sent
    content or a call's arguments, each chunk is fed to its stream, and a delta that is its next
    content (``content``) or its open call's next arguments fragment (``arguments``) goes out framed;
    a chunk that sends nothing sends nothing, as on the general path. Any other delta, or a repeated
    call, stops the lane with that chunk already fed: its delta is handed back as ``fed``."""

    __slots__ = ("fed", "was_fed")

    def __init__(self, chunks: AsyncIterator[TokenChunk], choice: Choice, timer: GenerationTimer) -> None:
        super().__init__(chunks, choice, timer)
        self.was_fed = False  # ``pending`` was fed to the stream and clocked: the run frames ``fed`` as it is
        self.fed: MessageDelta | None = None  # what feeding ``pending`` returned

    async def events(self, content: TextFrame | None, arguments: ArgumentsFrame | None) -> AsyncGenerator[bytes, None]:
        """Each chunk's delta framed by ``content`` or ``arguments`` (None: that kind is not framed
        here, and stops the lane), until the lane stops."""
        stream, index = self._choice.stream, self._choice.index
        assert stream is not None
        try:
            async for c in self._chunks:
                if self._stops(c):
                    return
                delta = stream.feed(c.text)
                if stream.repeat is not None:
                    self.pending, self.fed, self.was_fed = c, delta, True
                    return
                if delta is None:
                    continue  # nothing to send for this chunk (a marker, a call's head being written)
                if delta.tool_calls:
                    if arguments is not None and lane_delta(delta):
                        call = delta.tool_calls[0]
                        if out := arguments(index, call.index, call.arguments):  # (b"": the API sends no event)
                            yield out
                        continue
                elif content is not None and lane_delta(delta):
                    yield content(index, delta.content or "")
                    continue
                self.pending, self.fed, self.was_fed = c, delta, True
                return
        except Exception as exc:  # noqa: BLE001 - the run raises it where it maps the engine's errors
            self.error = exc
        finally:
            self._flush()
