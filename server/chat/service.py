"""Chat completions: request -> prompt + constraint -> engine -> message (JSON or SSE).

The route validates and calls :func:`prepare_chat`, then :func:`chat_response` or
:func:`chat_stream`. Parsing of reasoning and tool calls lives in ``server.stream``;
this module only wires the pieces and applies the OpenAI response rules.
"""
from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

from server.chat.custom_tools import InputStream, custom_input
from server.chat.generation import GenerationTimer, checked, completion_budget, logit_bias
from server.chat.output_checks import ToolCallChecker, validate_json_output
from server.chat.prompt_tokens import guard_for, markers_are_special, tokenize_chat_prompt
from server.chat.reasoning_budget import ReasoningBudget, budgeted_chunks, plan_reasoning_budget
from server.chat.sse import DONE, ContentFrames, chunk, sse_event
from server.chat.stream_guard import abort_shielded, guarded_stream
from server.engine.base import EngineAbortedError, EngineDeadError, EngineRequestError, GenerateRequest, Sampling, TokenChunk
from server.errors import APIError, bad_request
from server.protocol import ChatCompletionRequest, usage_dict
from server.state import ServerState, check_model
from server.structured.from_request import capabilities, request_constraint
from server.structured.spec import constraint_spec, prompt_tools
from tool_parsers.message_stream import MessageDelta, MessageStream
from tool_parsers.openai_message import assistant_message, call_delta, finish_reason, function_call, opening, text_delta

__all__ = ["PreparedChat", "prepare_chat", "chat_response", "chat_stream", "run_engine", "SCHEMA_VALIDATED",
           "ChoiceUpdate", "choice_updates", "new_choices", "usage_of"]

# Per choice, when the output was validated against a json_schema after generation:
# valid | invalid | skipped_length (non-streamed: also the x-gramserve-schema-validated header).
SCHEMA_VALIDATED = "schema_validated"

log = logging.getLogger("gramserve.chat")


@dataclass
class PreparedChat:
    request: ChatCompletionRequest
    id: str
    created: int
    prompt_ids: list[int]
    gen: GenerateRequest
    tool_names: tuple[str, ...] | None
    tool_schemas: dict[str, dict[str, Any]]
    json_schema: dict[str, Any] | None  # validated after generation when not strict
    strict: bool
    reasoning_budget: ReasoningBudget | None = None  # max_reasoning_tokens: two engine phases


def prepare_chat(state: ServerState, req: ChatCompletionRequest) -> PreparedChat:
    """Validate what pydantic cannot, render the prompt and build the constraint."""
    check_model(state, req.model)
    s = state.settings
    if req.tools and len(req.tools) > s.max_tools:
        raise bad_request(f"Too many tools: {len(req.tools)} (this server accepts at most {s.max_tools}).",
                          param="tools", code="too_many_tools")
    if req.tool_choice not in (None, "none") and not req.tools:
        raise bad_request("'tool_choice' is set but no 'tools' were given.", param="tool_choice", code="invalid_value")
    tools = prompt_tools(req)
    if tools and state.tool_parser is None:
        raise bad_request("This server has no tool-call parser for its chat template; start it with "
                          "--tool-call-parser NAME to use 'tools'.", param="tools", code="tools_unsupported")
    messages = [m.model_dump(exclude_none=True) for m in req.messages]
    # client text that spells a control token (<|im_end|>...) is encoded as plain text; a
    # RenderError is a 400 naming its param as it stands
    prompt, prompt_ids = tokenize_chat_prompt(
        state.renderer, state.engine.tokenizer, messages, tools=tools, add_generation_prompt=True,
        chat_template_kwargs=req.chat_template_kwargs,
    )
    if state.settings.log_prompts:  # off by default: prompts are user data
        log.info("prompt", extra={"prompt": prompt, "prompt_tokens": len(prompt_ids)})
    max_tokens = completion_budget(state.engine.max_model_len, len(prompt_ids), req.requested_max_tokens(),
                                   param="max_completion_tokens" if req.max_completion_tokens else "max_tokens",
                                   prompt_param="messages")
    reasoning_budget = plan_reasoning_budget(state, req)
    # Capped thinking runs the think block as its own engine phase: the request's constraint
    # is then the answer alone, without the reasoning prefix.
    spec = constraint_spec(req, capabilities(state), think=reasoning_budget is None)
    built = request_constraint(state, spec)
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    sampling = Sampling(
        max_tokens=max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        n=req.n,
        seed=req.seed,
        stop=req.stop_list(),
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        logprobs=logprobs,
        ignore_eos=req.ignore_eos,
        skip_special_tokens=not (tools and _markers_special(state)),
        logit_bias=logit_bias(req, state.engine.vocab_size),
    )
    rid = "chatcmpl-" + uuid.uuid4().hex
    # allowed_tools: calls to the others are not returned
    callable_names = spec.tools.names if spec.tools else ()
    tool_schemas = {n: p or {} for n, p in spec.tools.tools if n in callable_names} if spec.tools else {}
    return PreparedChat(
        request=req, id=rid, created=int(time.time()), prompt_ids=prompt_ids,
        gen=checked(state.engine, GenerateRequest(request_id=rid, prompt_token_ids=prompt_ids, sampling=sampling,
                                                  constraint=built.constraint)),
        tool_names=tuple(tool_schemas) if tools else None, tool_schemas=tool_schemas,
        json_schema=built.schema, strict=built.strict, reasoning_budget=reasoning_budget,
    )


def _markers_special(state: ServerState) -> bool:
    """Whether the tool-call family's markers are special tokens (then kept in the output)."""

    parser = state.tool_parser
    if parser is None:
        return False
    return markers_are_special(state.engine.tokenizer, (parser.start, parser.end, parser.format.trigger))


def _new_stream(state: ServerState, p: PreparedChat, *, streaming: bool) -> MessageStream:
    reasoning = state.reasoning_parser
    if reasoning is not None and not p.request.thinking_enabled():
        from reasoning_parsers import get_reasoning_parser

        reasoning = get_reasoning_parser(reasoning.name, thinking=False)
    return MessageStream(
        tool_parser=state.tool_parser if p.tool_names else None,
        reasoning_parser=reasoning,
        tool_names=p.tool_names,
        streaming=streaming,
        guard_repeats=not state.settings.allow_duplicate_tool_calls,
    )


def _reasoning_field(state: ServerState) -> str | None:
    """Where reasoning goes in messages and deltas (None: no reasoning parser, no field)."""
    return None if state.reasoning_parser is None else state.settings.reasoning_field


def _logprobs_json(chunks: list[Any]) -> dict[str, Any]:
    return {
        "content": [
            {"token": lp.token, "logprob": lp.logprob, "bytes": lp.bytes,
             "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": t.bytes} for t in lp.top]}
            for lp in chunks
        ],
        "refusal": None,
    }


class _Choice:
    """Per-choice accumulation shared by the streamed and non-streamed paths."""

    def __init__(self, state: ServerState, p: PreparedChat, index: int, *, streaming: bool) -> None:
        self.index = index
        self.legacy = p.request.legacy_functions()
        self.custom = p.request.custom_tool_names()  # calls answered as type "custom"
        self.inputs: dict[int, InputStream] = {}  # custom calls being streamed, by call index
        self.stream = _new_stream(state, p, streaming=streaming)
        self.tokens = 0
        self.finish: str | None = None
        self.logprobs: list[Any] = []

    def finish_reason(self, final: Any) -> str:
        return finish_reason(final, length=self.finish == "length", legacy=self.legacy)


def _check_choice(p: PreparedChat, choice: _Choice, checker: ToolCallChecker) -> tuple[Any, str | None]:
    """The finishing step of one choice, the same streamed or not: tool-call outcomes counted,
    JSON output validated against its schema. Returns the final message and that outcome."""
    final = choice.stream.final_message()
    checker.check(final, p.tool_schemas)
    outcome = None
    if p.json_schema is not None and not final.tool_calls:  # the format governs text answers only
        outcome = validate_json_output(final.content or "", p.json_schema, finished=choice.finish != "length")
    return final, outcome


def _call(c: Any, custom: frozenset[str]) -> dict[str, Any]:
    if c.name in custom:
        return {"id": c.id, "type": "custom", "custom": {"name": c.name, "input": custom_input(c.arguments)}}
    return function_call(c)


def _message(state: ServerState, final: Any, *, legacy: bool = False,
             custom: frozenset[str] = frozenset()) -> dict[str, Any]:
    calls = [_call(c, custom) for c in final.tool_calls]
    return assistant_message(final, reasoning_field=_reasoning_field(state), calls=calls, legacy=legacy)


async def run_engine(state: ServerState, gen: GenerateRequest) -> AsyncGenerator[TokenChunk, None]:
    """The engine's chunks, with engine failures mapped to API errors."""
    state.running.add(gen.request_id)
    try:
        async for c in state.engine.generate(gen):
            yield c
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
        state.running.discard(gen.request_id)


def _engine_chunks(state: ServerState, p: PreparedChat) -> AsyncGenerator[TokenChunk, None]:
    """The request's chunks: one engine request, or two phases when the thinking is capped."""
    if p.reasoning_budget is None:
        return run_engine(state, p.gen)
    return budgeted_chunks(state, p.gen, p.reasoning_budget, run=run_engine)


async def _open_choices(state: ServerState, p: PreparedChat, choices: list[_Choice],
                        timer: GenerationTimer) -> AsyncGenerator[tuple[_Choice, TokenChunk], None]:
    """The engine's chunks with their choice, for choices still open. The caller sets
    ``choice.finish``; a choice that ended at a repeated call ignores the rest, and generation
    stops (the engine request aborted) once every choice has ended."""
    async with contextlib.aclosing(_engine_chunks(state, p)) as chunks:
        async for c in chunks:
            timer.on_chunk(c)
            ch = choices[c.index]
            ch.tokens += c.num_tokens
            if ch.finish:  # the turn ended at a repeated call: the rest is ignored
                continue
            yield ch, c
            if all(x.finish for x in choices):
                break
    if any(x.stream.repeat for x in choices):
        await abort_shielded(state, [p.id])  # stop generating what nobody will read


async def chat_response(state: ServerState, p: PreparedChat) -> tuple[dict[str, Any], dict[str, str]]:
    """Non-streamed completion. Returns the body and extra response headers."""
    choices = new_choices(state, p, streaming=False)
    timer = GenerationTimer()
    for_abort = True
    try:
        async with contextlib.aclosing(_open_choices(state, p, choices, timer)) as live:
            async for ch, c in live:
                ch.stream.feed(c.text)
                ch.logprobs.extend(c.logprobs)
                ch.finish = c.finish_reason or ("stop" if ch.stream.repeat else None)
        for_abort = False
    finally:
        timer.close()
        if for_abort:
            await abort_shielded(state, [p.id])
    checker = ToolCallChecker(parser=getattr(state.tool_parser, "name", "none"))
    headers: dict[str, str] = {}
    out_choices = []
    outcomes = []
    for ch in choices:
        ch.stream.finish()
        final, outcome = _check_choice(p, ch, checker)
        out = {
            "index": ch.index,
            "message": _message(state, final, legacy=ch.legacy, custom=ch.custom),
            "logprobs": _logprobs_json(ch.logprobs) if p.request.logprobs else None,
            "finish_reason": ch.finish_reason(final),
        }
        if outcome is not None:
            out[SCHEMA_VALIDATED] = outcome
            outcomes.append(outcome)
        out_choices.append(out)
    if outcomes:  # one outcome per choice, in index order
        headers["x-gramserve-schema-validated"] = ",".join(outcomes)
    body = {
        "id": p.id, "object": "chat.completion", "created": p.created, "model": state.engine.model_name,
        "system_fingerprint": None, "choices": out_choices, "usage": usage_of(state, p, choices, timer),
    }
    return body, headers


def _reasoning_tokens(state: ServerState, choices: list[_Choice]) -> int | None:
    if state.reasoning_parser is None:
        return None
    total = 0
    encode = guard_for(state.engine.tokenizer).encode
    for ch in choices:
        text = ch.stream.parsed.reasoning
        if text:
            total += len(encode(text))
    return total


def _is_arguments_fragment(body: dict[str, Any]) -> bool:
    """``{"tool_calls": [{"index": k, "function": {"arguments": "..."}}]}`` and nothing else."""
    calls = body.get("tool_calls") if len(body) == 1 else None
    if not calls or len(calls) != 1:
        return False
    call = calls[0]
    return len(call) == 2 and "index" in call and call.get("function", {}).keys() == {"arguments"}


def _delta_bodies(delta: Any, state: ServerState, choice: _Choice) -> list[dict[str, Any]]:
    """One delta body for text, then one per tool-call entry (header alone, as OpenAI does);
    for the legacy functions API as it streamed them, ``delta.function_call``; custom tool
    calls as ``custom.input`` text."""
    if delta is None:
        return []
    bodies: list[dict[str, Any]] = []
    text = text_delta(delta, reasoning_field=_reasoning_field(state))
    if text:
        bodies.append(text)
    for tc in delta.tool_calls:
        if choice.legacy:
            fn = {"name": tc.name, "arguments": tc.arguments} if tc.name is not None else {"arguments": tc.arguments}
            bodies.append({"function_call": fn})
            continue
        if tc.name is not None and tc.name in choice.custom:
            choice.inputs[tc.index] = InputStream()
            call = {"index": tc.index, "id": tc.id, "type": "custom",
                    "custom": {"name": tc.name, "input": choice.inputs[tc.index].feed(tc.arguments)}}
        elif tc.index in choice.inputs:
            piece = choice.inputs[tc.index].feed(tc.arguments)
            if not piece:
                continue
            call = {"index": tc.index, "custom": {"input": piece}}
        else:
            call = call_delta(tc)
        bodies.append({"tool_calls": [call]})
    return bodies


@dataclass
class ChoiceUpdate:
    """What one engine chunk did to one choice of a streamed answer: the deltas to send, and
    on the choice's last update its finish reason, final message and JSON validation outcome."""

    choice: _Choice
    deltas: list[MessageDelta]
    logprobs: list[Any]
    finish_reason: str | None = None
    final: Any = None
    schema_validated: str | None = None


def new_choices(state: ServerState, p: PreparedChat, *, streaming: bool) -> list[_Choice]:
    return [_Choice(state, p, i, streaming=streaming) for i in range(p.request.n)]


async def choice_updates(state: ServerState, p: PreparedChat, choices: list[_Choice],
                         timer: GenerationTimer) -> AsyncGenerator[ChoiceUpdate, None]:
    """The streamed answer as per-choice updates: one loop shared by every streamed API
    (chat chunks, Responses events), each framing the updates its own way."""
    checker = ToolCallChecker(parser=getattr(state.tool_parser, "name", "none"))
    async with contextlib.aclosing(_open_choices(state, p, choices, timer)) as live:
        async for ch, c in live:
            deltas = [d for d in (ch.stream.feed(c.text),) if d is not None]
            ended = c.finish_reason or ("stop" if ch.stream.repeat else None)
            if not ended:
                yield ChoiceUpdate(ch, deltas, list(c.logprobs))
                continue
            ch.finish = ended
            deltas += [d for d in (ch.stream.finish(),) if d is not None]
            final, outcome = _check_choice(p, ch, checker)
            yield ChoiceUpdate(ch, deltas, list(c.logprobs), finish_reason=ch.finish_reason(final), final=final,
                               schema_validated=outcome)


def usage_of(state: ServerState, p: PreparedChat, choices: list[_Choice], timer: GenerationTimer) -> dict[str, Any]:
    """The answer's usage, recorded in the token counters (call once, at the end)."""
    completion_tokens = sum(ch.tokens for ch in choices)
    timer.record(len(p.prompt_ids), completion_tokens)
    return usage_dict(len(p.prompt_ids), completion_tokens, _reasoning_tokens(state, choices))


def chat_stream(state: ServerState, p: PreparedChat) -> AsyncIterator[bytes]:
    """SSE stream, framed like OpenAI's: role first, one id, finish chunk, usage, [DONE]."""
    return guarded_stream(_chat_events(state, p), state=state, request_ids=[p.id])


async def _chat_events(state: ServerState, p: PreparedChat) -> AsyncIterator[bytes]:
    req = p.request
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    choices = new_choices(state, p, streaming=True)
    model = state.engine.model_name
    timer = GenerationTimer()

    def frame(choice_list: list[dict[str, Any]]) -> bytes:
        return sse_event(chunk(id=p.id, created=p.created, model=model, choices=choice_list))

    fast = ContentFrames(id=p.id, created=p.created, model=model)

    opened: set[int] = set()

    def opened_with(index: int, body: dict[str, Any] | None) -> list[dict[str, Any]]:
        """A choice opens with its role when its first delta is known (``opening``)."""
        if index in opened:
            return [body] if body is not None else []
        opened.add(index)
        return opening(body)

    try:
        async with contextlib.aclosing(choice_updates(state, p, choices, timer)) as updates:
            async for u in updates:
                ch = u.choice
                if len(u.deltas) == 1 and not u.finish_reason and not req.logprobs and ch.index in opened:
                    # The per-token hot paths, byte for byte what the general path below frames.
                    d = u.deltas[0]
                    if d.content and not d.reasoning and not d.tool_calls:
                        yield fast.content(ch.index, d.content)
                        continue
                    if not d.content and not d.reasoning and len(d.tool_calls) == 1 and not ch.legacy:
                        tc = d.tool_calls[0]
                        if tc.name is None and tc.index not in ch.inputs:
                            yield fast.arguments(ch.index, tc.index, tc.arguments)
                            continue
                bodies = [b for d in u.deltas for b in _delta_bodies(d, state, ch)]
                if req.logprobs and u.logprobs and not bodies:
                    bodies = [{}]
                bodies = [out for body in bodies for out in opened_with(ch.index, body)]
                if u.finish_reason and ch.index not in opened:
                    bodies = opened_with(ch.index, None)
                lp_at = 1 if len(bodies) > 1 and bodies[0] == {"role": "assistant", "content": ""} else 0
                events: list[bytes] = []  # one engine chunk's events go out in one write
                for k, body in enumerate(bodies):
                    lp = _logprobs_json(u.logprobs) if (req.logprobs and k == lp_at) else None
                    if lp is None and len(body) == 1 and "content" in body:  # the per-token hot path
                        events.append(fast.content(ch.index, body["content"]))
                        continue
                    if lp is None and _is_arguments_fragment(body):  # the hot path of a tool call
                        call = body["tool_calls"][0]
                        events.append(fast.arguments(ch.index, call["index"], call["function"]["arguments"]))
                        continue
                    events.append(frame([{"index": ch.index, "delta": body, "logprobs": lp, "finish_reason": None}]))
                if u.finish_reason:
                    last = {"index": ch.index, "delta": {}, "logprobs": None, "finish_reason": u.finish_reason}
                    if u.schema_validated is not None:  # a stream has no headers left: the finish chunk says it
                        last[SCHEMA_VALIDATED] = u.schema_validated
                    events.append(frame([last]))
                if events:
                    yield events[0] if len(events) == 1 else b"".join(events)
        for ch in choices:  # every choice is opened, even one the engine said nothing for
            for body in opened_with(ch.index, None):
                yield frame([{"index": ch.index, "delta": body, "logprobs": None, "finish_reason": None}])
        usage = usage_of(state, p, choices, timer)
        if include_usage:
            yield sse_event(chunk(id=p.id, created=p.created, model=model, choices=[], usage=usage))
        yield DONE
    finally:
        timer.close()
