"""``max_reasoning_tokens``: cap the think block, then close it and constrain the answer.

A grammar cannot count tokens, so a capped request runs as two engine phases behind one
chunk stream (the caller sees one request: same request id, one usage):

1. **think**: the prompt as rendered, ``max_tokens = cap`` (plus the start marker when the
   model must write it), ``stop = [end marker]`` and a grammar that allows only the think
   block. The grammar forbids EOS inside the block, so a ``"stop"`` finish always means the
   model wrote the end marker itself; ``"length"`` means the cap was hit.
2. **answer**: prompt + phase-1 text + end marker (re-tokenized, no special tokens), the
   remaining budget, the user's ``stop`` strings and the request's constraint, which the
   service builds as if thinking were off (no reasoning prefix) when a budget applies.

Between the phases one chunk carrying the end marker is emitted, so the MessageStream
sees ``reasoning</think>answer`` exactly as with a model that closed the block itself.
Usage: phase-1 tokens + the end marker's tokens when it was forced (vLLM's
``thinking_token_budget`` also generates the forced marker) + phase-2 tokens.
Phase 2 reuses the request id, so aborting that id aborts whichever phase runs.
With ``n > 1`` phase 1 runs once for all choices, then each choice's answer in turn.
"""
from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, replace

from server.engine.base import GenerateRequest, TokenChunk
from server.errors import bad_request
from server.json_types import JsonObject
from server.protocol import ChatCompletionRequest
from server.state import ServerState
from server.structured.constraints import Constraint
from server.structured.from_request import capabilities

__all__ = ["ReasoningBudget", "plan_reasoning_budget", "budgeted_chunks"]

Runner = Callable[[ServerState, GenerateRequest], AsyncIterator[TokenChunk]]


@dataclass(frozen=True)
class ReasoningBudget:
    """What a capped request needs at generation time (built once, before any output)."""

    cap: int  # thinking tokens allowed after the start marker
    start: str  # what the output begins with ("" when the prompt already opened the block)
    end: str  # the end marker
    think_constraint: Constraint  # phase 1: only the think block (phase 2 uses the request's)


def requested_cap(state: ServerState, req: ChatCompletionRequest) -> int | None:
    """The request's ``max_reasoning_tokens``, else the server default (if any)."""
    if req.max_reasoning_tokens is not None:
        return int(req.max_reasoning_tokens)
    default = state.settings.max_reasoning_tokens
    return None if default is None else int(default)


def think_block_constraint(start: str, end: str) -> Constraint:
    """Free text until ``end`` (after ``start`` when given); EOS is not allowed before ``end``."""
    fmt: JsonObject = {"type": "tag", "begin": start, "content": {"type": "any_text"}, "end": end}
    return Constraint("structural_tag", {"type": "structural_tag", "format": fmt})


def plan_reasoning_budget(state: ServerState, req: ChatCompletionRequest) -> ReasoningBudget | None:
    """None when nothing is capped (no cap asked, or thinking off); 400 when a cap cannot apply."""
    cap = requested_cap(state, req)
    if cap is None:
        return None
    if state.reasoning_parser is None:
        if req.max_reasoning_tokens is None:
            return None
        raise bad_request("'max_reasoning_tokens' needs a reasoning model: start the server with "
                          "--reasoning-parser NAME, or drop the field.", param="max_reasoning_tokens",
                          code="invalid_value")
    spec = capabilities(state).reasoning
    if spec is None or not spec.thinks(req.chat_template_kwargs, req.reasoning_effort):
        return None  # thinking turned off for this request: nothing to cap
    if not (spec.starts_open or spec.required):
        raise bad_request("'max_reasoning_tokens' needs a think block the output surely starts with: use a "
                          "reasoning parser whose template opens the block, or start the server with "
                          "--reasoning-required.", param="max_reasoning_tokens", code="invalid_value")
    think = think_block_constraint("" if spec.starts_open else spec.start, spec.end)
    if state.grammar_cache is not None:
        result = state.grammar_cache.compile(think)
        if not result.ok:  # pragma: no cover - a fixed, tiny grammar
            raise bad_request(f"The think-block grammar could not be compiled: {result.error}",
                              param="max_reasoning_tokens", code="invalid_constraint")
    return ReasoningBudget(cap=cap, start="" if spec.starts_open else spec.start, end=spec.end,
                           think_constraint=think)


def answer_floor(state: ServerState, constraint: Constraint | None) -> int | None:
    """The shortest answer's tokens when the answer closes within its budget, else None."""
    if constraint is None or not constraint.closes or state.grammar_cache is None:
        return None
    return state.grammar_cache.min_tokens(constraint)


async def budgeted_chunks(state: ServerState, gen: GenerateRequest, budget: ReasoningBudget, *,
                          run: Runner) -> AsyncGenerator[TokenChunk, None]:
    """The chunks of a capped request, as if one engine request had produced them.

    ``run(state, gen)`` is the engine call (with the service's error mapping).
    """
    tok = state.engine.tokenizer
    s = gen.sampling
    start_tokens = len(tok.encode(budget.start, add_special_tokens=False)) if budget.start else 0
    end_tokens = len(tok.encode(budget.end, add_special_tokens=False))
    think_max = min(s.max_tokens, budget.cap + start_tokens)
    # budget-aware closing: the think block ends early enough to leave the shortest answer its room
    floor = answer_floor(state, gen.constraint)
    if floor is not None:
        think_max = max(1, min(think_max, s.max_tokens - end_tokens - floor))
    texts = [""] * s.n
    used = [0] * s.n
    answer_next: list[int] = []

    def close(c: TokenChunk) -> list[TokenChunk]:
        """Phase 1 of choice ``c.index`` ended: either its final chunk, or the switch to phase 2."""
        i = c.index
        forced = c.finish_reason == "length"
        if forced and think_max == s.max_tokens:
            return [c]  # the whole budget went to thinking
        marker = end_tokens if forced else 0
        if s.max_tokens - used[i] - marker <= 0:
            return [replace(c, finish_reason="length")]
        used[i] += marker
        answer_next.append(i)
        return [replace(c, finish_reason=None), TokenChunk(index=i, text=budget.end, num_tokens=marker)]

    if budget.cap == 0 and not budget.start:
        for i in range(s.n):  # nothing to think: close the block at once
            for out in close(TokenChunk(index=i, text="", num_tokens=0, finish_reason="length")):
                yield out
    else:
        think = replace(gen, sampling=replace(s, max_tokens=think_max, stop=(budget.end,)),
                        constraint=budget.think_constraint)
        async with contextlib.aclosing(run(state, think)) as chunks:  # type: ignore[type-var]
            async for c in chunks:
                texts[c.index] += c.text
                used[c.index] += c.num_tokens
                for out in close(c) if c.finish_reason else [c]:
                    yield out
    for i in answer_next:
        prompt = list(gen.prompt_token_ids) + list(tok.encode(texts[i] + budget.end, add_special_tokens=False))
        room = min(s.max_tokens - used[i], state.engine.max_model_len - len(prompt))
        if room <= 0:
            yield TokenChunk(index=i, text="", num_tokens=0, finish_reason="length")
            continue
        answer = GenerateRequest(request_id=gen.request_id, prompt_token_ids=prompt,
                                 sampling=replace(s, n=1, max_tokens=room), constraint=gen.constraint)
        async with contextlib.aclosing(run(state, answer)) as chunks:  # type: ignore[type-var]
            async for c in chunks:
                yield replace(c, index=i, prompt_tokens=0, queue_seconds=None)
