"""The completions framer: a plan's run as a ``text_completion`` object or its SSE chunks.

Legacy text completions run on the same plan and run loop as chat (one engine request per
prompt, one after another); only the framing is theirs: the raw text, the echo, and the
legacy logprobs shape.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

from server.chat.sse import DONE, ContentFrames, Events, chunk, sse_event
from server.chat.stream_guard import guarded_stream
from server.engine.base import TokenLogprob
from server.json_types import JsonArray, JsonObject
from server.plan.build import RequestPlan
from server.plan.lanes import TextLane
from server.plan.run import ChoiceUpdate, PromptStarted, Run
from server.protocol import CompletionRequest
from server.state import ServerState
from server.structured.budget import CLOSED_BY_BUDGET

__all__ = ["completion_response", "completion_stream"]

# The text lane on (False: every chunk takes the general path; tests compare the two byte for byte,
# tests/unit/test_completion_frames.py).
FAST_PATHS = True


def _completion(plan: RequestPlan) -> CompletionRequest:
    assert isinstance(plan.request, CompletionRequest)
    return plan.request


def _legacy_logprobs(lps: list[TokenLogprob], offset: int) -> JsonObject:
    tokens: JsonArray = []
    token_lps: JsonArray = []
    tops: JsonArray = []
    offsets: JsonArray = []
    for lp in lps:
        tokens.append(lp.token)
        token_lps.append(lp.logprob)
        tops.append({t.token: t.logprob for t in lp.top})
        offsets.append(offset)
        offset += len(lp.token)
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}


async def completion_response(state: ServerState, plan: RequestPlan) -> JsonObject:
    """The non-streamed ``text_completion``: every prompt's choices, in order."""
    req = _completion(plan)
    run = Run(state, plan, streaming=False)
    await run.to_end()
    choices: JsonArray = []
    for ch in run.choices:
        prefix = plan.prompts[ch.index // req.n].text if req.echo else ""
        choices.append({
            "index": ch.index,
            "text": prefix + ch.text,
            "logprobs": _legacy_logprobs(ch.logprobs, len(prefix)) if req.logprobs is not None else None,
            "finish_reason": ch.finish or "stop",
            **({CLOSED_BY_BUDGET: True} if ch.closed else {}),  # docs/schema_support.md
        })
    usage = run.usage()
    return {
        "id": plan.id, "object": "text_completion", "created": int(time.time()),
        "model": state.engine.model_name, "system_fingerprint": None, "choices": choices, "usage": usage,
    }


def completion_stream(state: ServerState, plan: RequestPlan) -> AsyncIterator[Events]:
    return guarded_stream(_completion_events(state, plan), state=state, request_ids=plan.request_ids)


async def _completion_events(state: ServerState, plan: RequestPlan) -> AsyncIterator[Events]:
    req = _completion(plan)
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    rid, created, model = plan.id, int(time.time()), state.engine.model_name
    run = Run(state, plan, streaming=True)
    offsets = [0] * len(run.choices)

    def frame(choice: JsonObject) -> bytes:
        return sse_event(chunk(id=rid, created=created, model=model, choices=[choice], object="text_completion"))

    ended = False

    def ending() -> bytes:
        """The usage and ``[DONE]``, made once: with the last finish when it comes (one write)."""
        nonlocal ended
        ended = True
        usage = run.usage()
        if not include_usage:
            return DONE
        return sse_event(chunk(id=rid, created=created, model=model, choices=[], object="text_completion",
                               usage=usage)) + DONE

    try:
        async with contextlib.aclosing(run.text_updates() if FAST_PATHS else run.updates()) as updates:
            async for u in updates:
                if isinstance(u, TextLane):  # one choice's next texts, framed as they come (empty ones too, as below)
                    yield u.events(ContentFrames(id=rid, created=created, model=model, object="text_completion").text,
                                   empty=True)
                    continue
                if isinstance(u, PromptStarted):  # a prompt starts: its echo first (its choices, one write)
                    first = u.index * req.n
                    for j in range(req.n):
                        offsets[first + j] = len(u.prompt.text) if req.echo else 0
                    if req.echo:
                        yield b"".join(frame({"index": first + j, "text": u.prompt.text, "logprobs": None,
                                              "finish_reason": None}) for j in range(req.n))
                    continue
                if not isinstance(u, ChoiceUpdate):  # (no other lane: a completions choice has nothing to parse)
                    continue
                i = u.choice.index
                lp = _legacy_logprobs(u.logprobs, offsets[i]) if req.logprobs is not None else None
                offsets[i] += len(u.text)
                event = frame({"index": i, "text": u.text, "logprobs": lp, "finish_reason": u.finish_reason,
                               **({CLOSED_BY_BUDGET: True} if u.closed_by_budget else {})})
                if u.finish_reason and all(c.finish for c in run.choices):  # the last one: the rest is ready now
                    event += ending()
                yield event
        if not ended:  # the engine stopped without finishing every choice
            yield ending()
    finally:
        run.timer.close()
