"""The one run loop: a plan's engine requests as per-choice updates, streamed and not.

Every framer (chat chunks or JSON, Responses events or object, completions) reads the same
updates, so engine errors, token counts, the abort of a repeated call, the end of generation
once every choice has ended and the finishing checks happen once, whatever the API and
whether it streams. A framer only decides how an update looks on the wire.
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass
from typing import cast

from server.chat.custom_tools import InputStream
from server.chat.generation import GenerationTimer
from server.chat.output_checks import ToolCallChecker, validate_json_output
from server.chat.prompt_tokens import guard_for
from server.chat.reasoning_budget import budgeted_chunks
from server.chat.stream_guard import abort_shielded
from server.engine.base import EngineAbortedError, EngineDeadError, EngineRequestError, GenerateRequest, TokenChunk, TokenLogprob
from server.errors import APIError, bad_request
from server.json_types import JsonObject
from server.messages.message_stream import FinalMessage, MessageDelta, MessageStream
from server.messages.openai_message import finish_reason
from server.plan.build import Prompt, RequestPlan
from server.plan.lanes import Lane, ParsedLane, TextLane, lane_delta
from server.protocol import ChatCompletionRequest, usage_dict
from server.state import ServerState
from server.structured.budget import closed_by_budget
from tool_parsers.base import ToolParser

__all__ = ["Choice", "ChoiceUpdate", "PromptStarted", "Run", "Update", "calls_end_whole", "engine_errors",
           "grammar_names", "run_engine"]

log = logging.getLogger("gramserve.stream")


@contextlib.contextmanager
def engine_errors(state: ServerState, request_id: str) -> Iterator[None]:
    """Around iterating one engine request: engine failures raised as API errors, and the request
    counted as running (a context manager, not a generator wrapping the engine's: one generator
    hop fewer on the per-token path)."""
    state.running.add(request_id)
    try:
        yield
    except EngineAbortedError as exc:
        if state.cut:
            raise APIError("The server is shutting down and cut this response before it finished; retry the "
                           "request on another replica.",
                           code="server_shutdown") from exc
        raise APIError("The request was aborted before it finished.", code="aborted") from exc
    except EngineRequestError as exc:
        raise bad_request(f"The engine rejected the request: {exc}", code="invalid_value") from exc
    except EngineDeadError as exc:
        state.engine_dead = True
        raise APIError("The engine is not running; retry on another replica.", code="engine_dead") from exc
    finally:
        state.running.discard(request_id)


async def run_engine(state: ServerState, gen: GenerateRequest) -> AsyncGenerator[TokenChunk, None]:
    """The engine's chunks, with engine failures mapped to API errors (the reasoning budget's
    phases; a plain run iterates the engine inside :func:`engine_errors` itself)."""
    with engine_errors(state, gen.request_id):
        async for c in state.engine.generate(gen):
            yield c


def _new_stream(state: ServerState, plan: RequestPlan, req: ChatCompletionRequest, *, streaming: bool) -> MessageStream:
    reasoning = state.reasoning_parser
    if reasoning is not None:
        reasoning = reasoning.for_request(thinking=reasoning.thinks(req.chat_template_kwargs, req.reasoning_effort))
    channels = state.tool_parser is not None and state.tool_parser.channels  # Harmony: the parser reads every answer
    return MessageStream(
        tool_parser=_calls_parser(state, plan),
        reasoning_parser=reasoning,
        tool_names=plan.tool_names if plan.tool_names is not None or not channels else (),
        tool_schemas=plan.tool_schemas or None,  # families with typed, non-JSON arguments read them
        streaming=streaming,
        guard_repeats=not state.settings.allow_duplicate_tool_calls,
        early_names=reasoning is None and calls_end_whole(plan),
        grammar_names=grammar_names(plan),
    )


def _calls_parser(state: ServerState, plan: RequestPlan) -> ToolParser | None:
    """The call format a chat choice's stream runs: the family's, where the request offers tools or the
    family reads every answer (Harmony's channels); else none."""
    parser = state.tool_parser
    return parser if parser is not None and (plan.tool_names or parser.channels) else None


def calls_end_whole(plan: RequestPlan) -> bool:
    """Whether every call the model opens is sure to end whole, so its name may be streamed before
    its arguments: the tools' grammar holds the output (a call, once begun, is written to its end)
    and budget-aware closing ends it within ``max_tokens``, with no stop string (which the grammar
    cannot see) to cut it. A reasoning parser's thinking block is free text the grammar leaves open,
    so requests with one keep the rule for unconstrained calls (sent once their arguments begin)."""
    gen = plan.gen
    constraint = gen.constraint
    return (bool(plan.tool_names) and constraint is not None and constraint.kind == "structural_tag"
            and constraint.closes and not gen.sampling.stop)


def grammar_names(plan: RequestPlan) -> tuple[str, ...] | None:
    """The names the tools' grammar lets a call take (``ToolSpec.callable``), where only calls can
    begin with the family's start marker: the grammar holds every call (:func:`calls_end_whole`)
    and no JSON answer (``response_format``, structured outputs) could hold that marker as text.
    None elsewhere (a call is named by its parse alone)."""
    spec, tools = plan.spec, plan.tools
    if tools is None or not calls_end_whole(plan) or spec.structured_outputs:
        return None
    if spec.response_format is not None and spec.response_format.get("type") != "text":
        return None
    return tuple(t.name for t in tools.callable)


class Choice:
    """One choice's state, the same streamed or not. A chat (or Responses) choice is parsed into
    a message (``stream``); a completions choice is the engine's text as it is (``stream`` None)."""

    def __init__(self, state: ServerState, plan: RequestPlan, index: int, *, streaming: bool) -> None:
        req = plan.request
        self.index = index  # the API's choice index (completions: prompt * n + choice)
        self.streaming = streaming
        self.stream: MessageStream | None = None
        self.unparsed = True  # nothing to parse: a completions choice, a chat choice with no parser to run (below)
        self.legacy = False
        self.custom: frozenset[str] = frozenset()
        if isinstance(req, ChatCompletionRequest):
            if plan.tool_spec is not None:
                self.legacy = plan.tool_spec.legacy
                self.custom = plan.tool_spec.custom  # calls answered as type "custom"
            self.stream = _new_stream(state, plan, req, streaming=streaming)
            # nothing to parse (no call format in play, no reasoning): every chunk's text is content as it comes
            self.unparsed = state.reasoning_parser is None and _calls_parser(state, plan) is None
        self.inputs: dict[int, InputStream] = {}  # custom calls being streamed, by call index (chat framer)
        self.tokens = 0
        self.finish: str | None = None
        self.logprobs: list[TokenLogprob] = []  # not streamed: every chunk's logprobs
        self.text = ""  # unparsed: the text so far (not streamed, or streamed under budget-aware closing)
        self.closed = False  # the budget ended it and the grammar closed it complete (completions' mark)

    def finish_reason(self, final: FinalMessage) -> str:
        return finish_reason(final, length=self.finish == "length", legacy=self.legacy)


@dataclass(slots=True)
class ChoiceUpdate:
    """What one engine chunk did to one choice: the parsed deltas (or, unparsed, the engine's
    ``text``), and on the choice's last update its finish reason, final message and JSON
    validation outcome."""

    choice: Choice
    deltas: list[MessageDelta]
    text: str
    logprobs: list[TokenLogprob]
    finish_reason: str | None = None
    final: FinalMessage | None = None  # (parsed choices only)
    schema_validated: str | None = None
    closed_by_budget: bool = False  # the budget ended it, the grammar closed it: complete


@dataclass
class PromptStarted:
    """The engine request of ``plan.prompts[index]`` starts next (completions echo it first)."""

    index: int
    prompt: Prompt


Update = ChoiceUpdate | PromptStarted


class Run:
    """One run of a plan: its choices, its timer, and :meth:`updates`, the loop every framer reads."""

    def __init__(self, state: ServerState, plan: RequestPlan, *, streaming: bool) -> None:
        self.state = state
        self.plan = plan
        n = plan.request.n
        self.choices = [Choice(state, plan, i, streaming=streaming) for i in range(n * len(plan.prompts))]
        self.timer = GenerationTimer()
        self.running: str | None = None  # the engine request in flight (until it ended cleanly)
        self._checker = ToolCallChecker(parser=getattr(state.tool_parser, "name", "none"))

    @property
    def _memo_schema(self) -> bool:
        """Whether the plan's JSON schema is the constraint memo's object, shared by every request with
        this format (its validator is then found by identity)."""
        return self.plan.spec.memo_key is not None

    def _chunks(self, prompt: Prompt) -> tuple[AsyncIterator[TokenChunk], contextlib.AbstractContextManager[None]]:
        """One engine request and its error mapping, or two phases when the thinking is capped
        (each phase mapped by ``run_engine``)."""
        if self.plan.reasoning_budget is None:
            return self.state.engine.generate(prompt.gen), engine_errors(self.state, prompt.gen.request_id)
        return (budgeted_chunks(self.state, prompt.gen, self.plan.reasoning_budget, run=run_engine),
                contextlib.nullcontext())

    def _lane_fits(self) -> bool:
        """Whether the choice may take lanes (``text_updates``): one prompt, one choice, streamed, no
        logprobs, no thinking phases."""
        ch = self.choices[0]
        return (len(self.choices) == 1 and ch.streaming and self.plan.reasoning_budget is None
                and self.plan.gen.sampling.logprobs is None)

    def updates(self, *, quiet: bool = False) -> AsyncGenerator[Update, None]:
        """The answer as it is generated: per prompt a :class:`PromptStarted`, then one
        :class:`ChoiceUpdate` per engine chunk of a choice still open. A choice that ended at a
        repeated call ignores the rest, and generation stops (the engine request aborted) once
        every choice has ended. (One generator on the per-token path, not one per concern.)

        ``quiet``: a streamed chunk that sends nothing (no delta, no logprobs, not the end: a call's
        head, a marker being written) makes no update at all, for a framer that would skip it."""
        return cast(AsyncGenerator[Update, None], self._updates(lane=False, quiet=quiet))

    def text_updates(self) -> AsyncGenerator[Update | Lane, None]:
        """``updates(quiet=True)``, except that where one streamed choice may take lanes (``_lane_fits``),
        an update that puts it under way is followed by a lane (server/plan/lanes.py): a
        :class:`TextLane` after the first delta of a choice with nothing to parse (completions: its first
        update), a :class:`ParsedLane` after a parsed choice's content or arguments fragment. The lane is
        the next chunks, for the framer to frame and the response to send, with this generator (and the
        framer's) suspended meanwhile; the chunk that stopped it is then taken here as any other."""
        return self._updates(lane=True, quiet=True)

    async def _updates(self, *, lane: bool, quiet: bool) -> AsyncGenerator[Update | Lane, None]:
        n = self.plan.request.n
        lane = lane and self._lane_fits()
        constraint = self.plan.gen.constraint
        keep_text = constraint is not None and constraint.closes  # (as ``_update`` keeps a completions choice's)
        for i, prompt in enumerate(self.plan.prompts):
            yield PromptStarted(i, prompt)
            self.running = prompt.gen.request_id
            choices = self.choices[i * n:(i + 1) * n]
            source, errors = self._chunks(prompt)
            with errors:
                async with contextlib.aclosing(source) as chunks:  # type: ignore[type-var]
                    async for c in chunks:
                        u = self._take(choices, c, quiet=quiet)
                        while u is not None:
                            yield u
                            if u.choice.finish or not lane or (rest := self._lane(chunks, u, keep_text=keep_text)) is None:
                                break
                            yield rest  # the framer's events of the next chunks, sent by the response
                            if rest.error is not None:
                                raise rest.error  # (the engine's: mapped here, as from the loop)
                            u = self._resume(u.choice, rest, choices, quiet=quiet)
                        if u is not None and u.choice.finish and all(x.finish for x in choices):
                            break
            if any(x.stream is not None and x.stream.repeat for x in choices):
                await self._stop_after_repeat(prompt.gen.request_id)
            self.running = None

    def _lane(self, chunks: AsyncIterator[TokenChunk], u: ChoiceUpdate, *, keep_text: bool) -> Lane | None:
        """The lane the choice of update ``u`` takes next, if any: a choice with nothing to parse once it
        opened, a parsed one after content or an arguments fragment, where no call of its is framed
        otherwise than as its arguments' text (the legacy ``function_call``, a custom tool's decoded input)."""
        ch = u.choice
        if ch.unparsed:
            return TextLane(chunks, ch, self.timer, keep_text=keep_text) if u.deltas or ch.stream is None else None
        if ch.legacy or ch.custom or not u.deltas or not lane_delta(u.deltas[-1]):
            return None
        return ParsedLane(chunks, ch, self.timer)

    def _resume(self, ch: Choice, lane: Lane, choices: list[Choice], *, quiet: bool) -> ChoiceUpdate | None:
        """The update of the chunk that stopped ``lane`` (None: none, or it makes none)."""
        c = lane.pending
        if c is None:
            return None
        if isinstance(lane, ParsedLane) and lane.was_fed:  # fed and clocked by the lane: its delta as it is
            return self._fed(ch, c, lane.fed)
        return self._take(choices, c, quiet=quiet)

    def _take(self, choices: list[Choice], c: TokenChunk, *, quiet: bool) -> ChoiceUpdate | None:
        """What chunk ``c`` does to its choice: the update, or None when it makes none (its choice ended
        at a repeated call; ``quiet`` and the chunk sends nothing)."""
        self.timer.on_chunk(c)
        ch = choices[c.index]
        ch.tokens += c.num_tokens
        if ch.finish:  # the turn ended at a repeated call: the rest is ignored
            return None
        if quiet and ch.streaming and c.finish_reason is None and not c.logprobs and ch.stream:
            delta = ch.stream.feed(c.text)
            if delta is None and ch.stream.repeat is None:
                return None  # nothing to send for this chunk: no update
            return self._fed(ch, c, delta)
        return self._update(ch, c)

    async def _stop_after_repeat(self, request_id: str) -> None:
        """Stop generating what nobody will read. The answer is whole by now (a streamed one may be
        sent to its ``[DONE]``), so an abort that fails is logged, not made the answer's error."""
        try:
            await abort_shielded(self.state, [request_id])
        except Exception:  # noqa: BLE001 - any engine failure: the engine's own health check reports it
            log.warning("the engine request %s was not stopped after a repeated call", request_id, exc_info=True)

    def _update(self, ch: Choice, c: TokenChunk) -> ChoiceUpdate:
        """What chunk ``c`` does to choice ``ch`` (which ends here if ``c`` or a repeated call ends it)."""
        if not ch.streaming:
            ch.logprobs.extend(c.logprobs)
        stream = ch.stream
        if stream is None:  # completions: the text as the engine wrote it
            constraint = self.plan.gen.constraint
            if not ch.streaming or (constraint is not None and constraint.closes):
                ch.text += c.text
            ch.finish = c.finish_reason
            if c.finish_reason == "length":
                ch.closed = self.closed_text(ch.text)
            return ChoiceUpdate(ch, [], c.text, list(c.logprobs), finish_reason=c.finish_reason,
                                closed_by_budget=ch.closed)
        return self._fed(ch, c, stream.feed(c.text))

    def _fed(self, ch: Choice, c: TokenChunk, delta: MessageDelta | None) -> ChoiceUpdate:
        """:meth:`_update` once chunk ``c`` was fed to the choice's stream, which returned ``delta``."""
        stream = ch.stream
        assert stream is not None
        deltas = [delta] if delta is not None else []
        ended = c.finish_reason or ("stop" if stream.repeat else None)
        if not ended:
            return ChoiceUpdate(ch, deltas, c.text, list(c.logprobs) if c.logprobs else [])
        ch.finish = ended
        last = stream.finish()
        if last is not None:
            deltas.append(last)
        final, outcome = self.check(ch)
        return ChoiceUpdate(ch, deltas, c.text, list(c.logprobs), finish_reason=ch.finish_reason(final),
                            final=final, schema_validated=outcome, closed_by_budget=self.closed(ch, final, outcome))

    def closed(self, choice: Choice, final: FinalMessage, outcome: str | None) -> bool:
        """Whether the budget ended this choice and the grammar closed it complete."""
        return closed_by_budget(self.plan.gen.constraint, choice.finish, final, outcome)

    def closed_text(self, text: str) -> bool:
        """A completions choice the budget ended: complete when the grammar closed it (its JSON
        parses and fits the schema)."""
        constraint = self.plan.gen.constraint
        if constraint is None or not constraint.closes:
            return False
        schema = self.plan.json_schema
        outcome = None if schema is None else validate_json_output(text, schema, finished=True, shared=self._memo_schema)
        return closed_by_budget(constraint, "length", FinalMessage(reasoning=None, content=text, tool_calls=[]), outcome)

    def check(self, choice: Choice) -> tuple[FinalMessage, str | None]:
        """The finishing step of one parsed choice, the same streamed or not: tool-call outcomes
        counted, JSON output validated against its schema. Returns the final message and that
        outcome."""
        assert choice.stream is not None
        final = choice.stream.final_message()
        self._checker.check(final, self.plan.tool_schemas)
        outcome = None
        if self.plan.json_schema is not None and not final.tool_calls:  # the format governs text answers only
            closes = self.plan.gen.constraint is not None and self.plan.gen.constraint.closes
            outcome = validate_json_output(final.content or "", self.plan.json_schema,
                                           finished=choice.finish != "length" or closes, shared=self._memo_schema)
            if outcome == "invalid" and choice.finish == "length":
                outcome = "skipped_length"  # closing did not fit: cut, as without it
        return final, outcome

    async def to_end(self) -> list[ChoiceUpdate]:
        """Not streamed: run to the end; the choices' last updates in the order they came. The
        engine request in flight is aborted when this fails or is cancelled."""
        last: list[ChoiceUpdate] = []
        try:
            async with contextlib.aclosing(self.updates()) as updates:
                async for u in updates:
                    if isinstance(u, ChoiceUpdate) and u.finish_reason:
                        last.append(u)
        finally:
            self.timer.close()
            if self.running is not None:
                await abort_shielded(self.state, [self.running])
        return last

    def prompt_tokens(self) -> int:
        return sum(len(p.ids) for p in self.plan.prompts)

    def usage(self) -> JsonObject:
        """The answer's usage, recorded in the token counters (call once, at the end)."""
        completion_tokens = sum(ch.tokens for ch in self.choices)
        prompt_tokens = self.prompt_tokens()
        self.timer.record(prompt_tokens, completion_tokens)
        if self.plan.api == "completions":
            return usage_dict(prompt_tokens, completion_tokens)
        return usage_dict(prompt_tokens, completion_tokens, self._reasoning_tokens())

    def _reasoning_tokens(self) -> int | None:
        if self.state.reasoning_parser is None:
            return None
        total = 0
        encode = guard_for(self.state.engine.tokenizer).encode
        for ch in self.choices:
            text = ch.stream.parsed.reasoning if ch.stream is not None else ""
            if text:
                total += len(encode(text))
        return total
