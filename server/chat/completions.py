"""Legacy text completions (``/v1/completions``): prompt in, text out, same engine path."""
from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from server.chat.generation import GenerationTimer, checked, completion_budget, logit_bias
from server.chat.prompt_tokens import guard_for
from server.chat.service import run_engine
from server.chat.sse import DONE, chunk, sse_event
from server.chat.stream_guard import abort_shielded, guarded_stream
from server.engine.base import GenerateRequest, Sampling, TokenLogprob
from server.errors import bad_request
from server.protocol import CompletionRequest, usage_dict
from server.state import ServerState, check_model
from server.structured.from_request import capabilities, request_constraint
from server.structured.spec import constraint_spec

__all__ = ["prepare_completion", "completion_response", "completion_stream"]


def _prompts(state: ServerState, req: CompletionRequest) -> list[tuple[str, list[int]]]:
    p = req.prompt
    tok = state.engine.tokenizer
    encode = guard_for(tok).encode
    if isinstance(p, str):
        return [(p, encode(p))]
    if all(isinstance(x, int) for x in p):
        ids = [int(x) for x in p]
        vocab = len(tok)
        bad = [x for x in ids if not 0 <= x < vocab]
        if bad:
            raise bad_request(f"prompt has token ids outside this model's vocabulary (0..{vocab - 1}): "
                              f"{bad[:5]}.", param="prompt", code="invalid_value")
        return [(tok.decode(ids), ids)]
    return [(s, encode(s)) for s in p if isinstance(s, str)]  # a list of strings (pydantic: never mixed)


def prepare_completion(state: ServerState, req: CompletionRequest) -> list[tuple[str, GenerateRequest]]:
    check_model(state, req.model)
    constraint = request_constraint(state, constraint_spec(req, capabilities(state))).constraint
    out = []
    for text, ids in _prompts(state, req):
        max_tokens = completion_budget(state.engine.max_model_len, len(ids), req.max_tokens,
                                       param="max_tokens", prompt_param="prompt")
        sampling = Sampling(
            max_tokens=max_tokens,
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            n=req.n, seed=req.seed, stop=req.stop_list(),
            presence_penalty=req.presence_penalty, frequency_penalty=req.frequency_penalty,
            logprobs=req.logprobs, ignore_eos=req.ignore_eos,
            logit_bias=logit_bias(req, state.engine.vocab_size),
        )
        rid = "cmpl-" + uuid.uuid4().hex
        out.append((text, checked(state.engine, GenerateRequest(request_id=rid, prompt_token_ids=ids,
                                                                sampling=sampling, constraint=constraint))))
    return out


def _legacy_logprobs(lps: list[TokenLogprob], offset: int) -> dict[str, Any]:
    tokens, token_lps, tops, offsets = [], [], [], []
    for lp in lps:
        tokens.append(lp.token)
        token_lps.append(lp.logprob)
        tops.append({t.token: t.logprob for t in lp.top})
        offsets.append(offset)
        offset += len(lp.token)
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}


async def completion_response(state: ServerState, req: CompletionRequest,
                              jobs: list[tuple[str, GenerateRequest]]) -> dict[str, Any]:
    choices: list[dict[str, Any]] = []
    prompt_tokens = completion_tokens = 0
    timer = GenerationTimer()
    running: str | None = None
    try:
        for i, (text, gen) in enumerate(jobs):
            texts = [""] * req.n
            finish: list[str | None] = [None] * req.n
            lps: list[list[TokenLogprob]] = [[] for _ in range(req.n)]
            running = gen.request_id
            async for c in run_engine(state, gen):
                timer.on_chunk(c)
                texts[c.index] += c.text
                lps[c.index].extend(c.logprobs)
                completion_tokens += c.num_tokens
                if c.finish_reason:
                    finish[c.index] = c.finish_reason
            running = None
            prompt_tokens += len(gen.prompt_token_ids)
            prefix = text if req.echo else ""
            for j in range(req.n):
                choices.append({
                    "index": i * req.n + j,
                    "text": prefix + texts[j],
                    "logprobs": _legacy_logprobs(lps[j], len(prefix)) if req.logprobs is not None else None,
                    "finish_reason": finish[j] or "stop",
                })
    finally:
        timer.close()
        if running is not None:
            await abort_shielded(state, [running])
    timer.record(prompt_tokens, completion_tokens)
    return {
        "id": jobs[0][1].request_id, "object": "text_completion", "created": int(time.time()),
        "model": state.engine.model_name, "system_fingerprint": None, "choices": choices,
        "usage": usage_dict(prompt_tokens, completion_tokens),
    }


def completion_stream(state: ServerState, req: CompletionRequest,
                      jobs: list[tuple[str, GenerateRequest]]) -> AsyncIterator[bytes]:
    return guarded_stream(_completion_events(state, req, jobs), state=state,
                          request_ids=[gen.request_id for _, gen in jobs])


async def _completion_events(state: ServerState, req: CompletionRequest,
                             jobs: list[tuple[str, GenerateRequest]]) -> AsyncIterator[bytes]:
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    rid, created, model = jobs[0][1].request_id, int(time.time()), state.engine.model_name
    prompt_tokens = completion_tokens = 0
    timer = GenerationTimer()

    def frame(choice: dict[str, Any]) -> bytes:
        return sse_event(chunk(id=rid, created=created, model=model, choices=[choice], object="text_completion"))

    try:
        for i, (text, gen) in enumerate(jobs):
            if req.echo:
                for j in range(req.n):
                    yield frame({"index": i * req.n + j, "text": text, "logprobs": None, "finish_reason": None})
            offsets = [len(text) if req.echo else 0] * req.n
            async for c in run_engine(state, gen):
                timer.on_chunk(c)
                completion_tokens += c.num_tokens
                lp = _legacy_logprobs(list(c.logprobs), offsets[c.index]) if req.logprobs is not None else None
                offsets[c.index] += len(c.text)
                yield frame({"index": i * req.n + c.index, "text": c.text, "logprobs": lp,
                             "finish_reason": c.finish_reason})
            prompt_tokens += len(gen.prompt_token_ids)
        timer.record(prompt_tokens, completion_tokens)
        if include_usage:
            yield sse_event(chunk(id=rid, created=created, model=model, choices=[], object="text_completion",
                                  usage=usage_dict(prompt_tokens, completion_tokens)))
        yield DONE
    finally:
        timer.close()
