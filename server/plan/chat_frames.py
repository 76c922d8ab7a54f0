"""The chat framer: a plan's run as a ``chat.completion`` object or as OpenAI's SSE chunks.

Both read :meth:`server.plan.run.Run.updates`, the one run loop; this module only decides how
an update looks on the wire. The per-token fast paths (a text delta, an arguments fragment)
live here beside the general path they must match byte for byte.
"""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import cast

from server.chat.custom_tools import InputStream, custom_input
from server.chat.sse import DONE, ContentFrames, Events, chunk, sse_event
from server.chat.stream_guard import guarded_stream
from server.engine.base import TokenLogprob
from server.json_types import JsonArray, JsonObject
from server.messages.message_stream import FinalMessage, FinalToolCall, MessageDelta
from server.messages.openai_message import assistant_message, call_delta, function_call, opening, text_delta
from server.plan.build import RequestPlan
from server.plan.lanes import ParsedLane, TextLane
from server.plan.run import Choice, ChoiceUpdate, Run
from server.protocol import ChatCompletionRequest
from server.state import ServerState
from server.structured.budget import CLOSED_BY_BUDGET

__all__ = ["SCHEMA_VALIDATED", "chat_response", "chat_stream"]

# The per-token fast paths below on (False: every update takes the general path; tests compare the two
# byte for byte, tests/unit/test_chat_frames.py).
FAST_PATHS = True

# Per choice, when the output was validated against a json_schema after generation:
# valid | invalid | skipped_length (non-streamed: also the x-gramserve-schema-validated header).
SCHEMA_VALIDATED = "schema_validated"


def _chat(plan: RequestPlan) -> ChatCompletionRequest:
    assert isinstance(plan.request, ChatCompletionRequest)
    return plan.request


def _reasoning_field(state: ServerState) -> str | None:
    """Where reasoning goes in messages and deltas (None: no reasoning parser, no field)."""
    return None if state.reasoning_parser is None else state.settings.reasoning_field


def _logprobs_json(chunks: list[TokenLogprob]) -> JsonObject:
    content = [
        {"token": lp.token, "logprob": lp.logprob, "bytes": lp.bytes,
         "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": t.bytes} for t in lp.top]}
        for lp in chunks
    ]
    # JSON as built (the engine's ``bytes`` lists are list[int], not list[JsonValue]: no copy of each)
    return {"content": cast(JsonArray, content), "refusal": None}


def _call(c: FinalToolCall, custom: frozenset[str]) -> JsonObject:
    if c.name in custom:
        return {"id": c.id, "type": "custom", "custom": {"name": c.name, "input": custom_input(c.arguments)}}
    return function_call(c)


def _message(state: ServerState, final: FinalMessage, *, legacy: bool = False,
             custom: frozenset[str] = frozenset()) -> JsonObject:
    calls: JsonArray = [_call(c, custom) for c in final.tool_calls]
    return assistant_message(final, reasoning_field=_reasoning_field(state), calls=calls, legacy=legacy)


async def chat_response(state: ServerState, plan: RequestPlan) -> tuple[JsonObject, dict[str, str]]:
    """Non-streamed completion. Returns the body and extra response headers."""
    req = _chat(plan)
    run = Run(state, plan, streaming=False)
    ended = {u.choice.index: u for u in await run.to_end()}
    headers: dict[str, str] = {}
    out_choices: JsonArray = []
    outcomes = []
    for ch in run.choices:
        u = ended.get(ch.index)
        if u is None:  # the engine ended without finishing this choice: it ends as it stands
            assert ch.stream is not None
            ch.stream.finish()
            final, outcome = run.check(ch)
            reason = ch.finish_reason(final)
            closed = run.closed(ch, final, outcome)
        else:
            assert u.final is not None  # a parsed choice's last update carries its message
            final, outcome, reason = u.final, u.schema_validated, u.finish_reason or "stop"
            closed = u.closed_by_budget
        out: JsonObject = {
            "index": ch.index,
            "message": _message(state, final, legacy=ch.legacy, custom=ch.custom),
            "logprobs": _logprobs_json(ch.logprobs) if req.logprobs else None,
            "finish_reason": reason,
        }
        if outcome is not None:
            out[SCHEMA_VALIDATED] = outcome
            outcomes.append(outcome)
        if closed:
            out[CLOSED_BY_BUDGET] = True
        out_choices.append(out)
    if outcomes:  # one outcome per choice, in index order
        headers["x-gramserve-schema-validated"] = ",".join(outcomes)
    body: JsonObject = {
        "id": plan.id, "object": "chat.completion", "created": plan.created, "model": state.engine.model_name,
        "system_fingerprint": None, "choices": out_choices, "usage": run.usage(),
    }
    return body, headers


def _arguments_fragment(body: JsonObject) -> tuple[int, str] | None:
    """For ``{"tool_calls": [{"index": k, "function": {"arguments": "..."}}]}`` and nothing else:
    the call's index and the arguments' text (None for any other body)."""
    calls = body.get("tool_calls") if len(body) == 1 else None
    if not isinstance(calls, list) or len(calls) != 1:
        return None
    call = calls[0]
    if not isinstance(call, dict) or len(call) != 2:
        return None
    index, function = call.get("index"), call.get("function")
    if not isinstance(index, int) or not isinstance(function, dict) or function.keys() != {"arguments"}:
        return None
    arguments = function["arguments"]
    return (index, arguments) if isinstance(arguments, str) else None


def _delta_bodies(delta: MessageDelta | None, state: ServerState, choice: Choice) -> list[JsonObject]:
    """One delta body for text, then one per tool-call entry (header alone, as OpenAI does);
    for the legacy functions API as it streamed them, ``delta.function_call``; custom tool
    calls as ``custom.input`` text."""
    if delta is None:
        return []
    bodies: list[JsonObject] = []
    text = text_delta(delta, reasoning_field=_reasoning_field(state))
    if text:
        bodies.append(text)
    for tc in delta.tool_calls:
        call: JsonObject
        if choice.legacy:
            fn: JsonObject = {"name": tc.name, "arguments": tc.arguments} if tc.name is not None else {"arguments": tc.arguments}
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


def chat_stream(state: ServerState, plan: RequestPlan) -> AsyncIterator[Events]:
    """SSE stream, framed like OpenAI's: role first, one id, finish chunk, usage, [DONE]. An item is
    one write's events, or a run of them to send as they come (``Events``)."""
    return guarded_stream(_chat_events(state, plan), state=state, request_ids=[plan.id])


async def _chat_events(state: ServerState, p: RequestPlan) -> AsyncIterator[Events]:
    req = _chat(p)
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    run = Run(state, p, streaming=True)
    model = state.engine.model_name

    def frame(choice_list: list[JsonObject]) -> bytes:
        return sse_event(chunk(id=p.id, created=p.created, model=model, choices=choice_list))

    fast = ContentFrames(id=p.id, created=p.created, model=model)

    opened: set[int] = set()

    def opened_with(index: int, body: JsonObject | None) -> list[JsonObject]:
        """A choice opens with its role when its first delta is known (``opening``)."""
        if index in opened:
            return [body] if body is not None else []
        opened.add(index)
        return opening(body)

    ended = False

    def ending() -> list[bytes]:
        """What follows the last finish: choices never opened, the usage, ``[DONE]`` (made once)."""
        nonlocal ended
        ended = True
        out = [frame([{"index": ch.index, "delta": body, "logprobs": None, "finish_reason": None}])
               for ch in run.choices for body in opened_with(ch.index, None)]
        usage = run.usage()
        if include_usage:
            out.append(sse_event(chunk(id=p.id, created=p.created, model=model, choices=[], usage=usage)))
        out.append(DONE)
        return out

    try:
        async with contextlib.aclosing(run.text_updates() if FAST_PATHS else run.updates()) as updates:
            async for u in updates:
                if isinstance(u, TextLane):  # the rest of a choice's text, framed as it comes, its role already sent
                    yield u.events(fast.content)
                    continue
                if isinstance(u, ParsedLane):  # its next content or arguments fragments (server/plan/lanes.py)
                    yield u.events(fast.content, fast.arguments)
                    continue
                if not isinstance(u, ChoiceUpdate):
                    continue
                ch = u.choice
                if not u.deltas and not u.finish_reason and not (req.logprobs and u.logprobs):
                    continue  # nothing to send yet (a call's name still being written, a marker)
                if FAST_PATHS and len(u.deltas) == 1 and not u.finish_reason and not req.logprobs and ch.index in opened:
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
                events: list[bytes] = []  # one engine chunk's events go out in one write (docs/performance.md)
                for k, body in enumerate(bodies):
                    lp = _logprobs_json(u.logprobs) if (req.logprobs and k == lp_at) else None
                    if FAST_PATHS and lp is None and len(body) == 1 and isinstance(text := body.get("content"), str):
                        events.append(fast.content(ch.index, text))  # the per-token hot path
                        continue
                    fragment = _arguments_fragment(body) if FAST_PATHS and lp is None else None
                    if fragment is not None:  # the hot path of a tool call
                        events.append(fast.arguments(ch.index, *fragment))
                        continue
                    events.append(frame([{"index": ch.index, "delta": body, "logprobs": lp, "finish_reason": None}]))
                if u.finish_reason:
                    last: JsonObject = {"index": ch.index, "delta": {}, "logprobs": None, "finish_reason": u.finish_reason}
                    if u.schema_validated is not None:  # a stream has no headers left: the finish chunk says it
                        last[SCHEMA_VALIDATED] = u.schema_validated
                    if u.closed_by_budget:
                        last[CLOSED_BY_BUDGET] = True
                    events.append(frame([last]))
                    if all(c.finish for c in run.choices):  # the last choice ended: the rest is ready now
                        events += ending()
                if events:
                    yield events[0] if len(events) == 1 else b"".join(events)
        if not ended:  # the engine stopped without finishing every choice
            yield b"".join(ending())
    finally:
        run.timer.close()
