"""Token budgets and per-request timing shared by chat and text completions."""
from __future__ import annotations

import time

from server import metrics
from server.engine.base import EngineRequestError, GenerateRequest, TokenChunk
from server.errors import bad_request

__all__ = ["GenerationTimer", "completion_budget", "checked", "logit_bias"]

_SAMPLING_PARAMS = ("n", "temperature", "top_p", "seed", "stop", "logprobs", "max_tokens", "presence_penalty",
                    "frequency_penalty")


def checked(engine: object, gen: GenerateRequest) -> GenerateRequest:
    """``gen`` once the engine accepts its values; else a 400 naming the parameter, before any
    response (or stream) has started."""
    try:
        engine.validate(gen)  # type: ignore[attr-defined]
    except EngineRequestError as exc:
        first = str(exc).split(" ", 1)[0].strip("'`:")
        raise bad_request(f"The engine refuses these values: {exc}", code="invalid_value",
                          param=first if first in _SAMPLING_PARAMS else None) from exc
    return gen


def completion_budget(max_model_len: int, prompt_tokens: int, requested: int | None, *,
                      param: str, prompt_param: str) -> int:
    """The completion budget: what was asked, or all the context left; 400 when it cannot fit.

    ``param`` names the budget field the client used (``max_tokens`` or
    ``max_completion_tokens``), ``prompt_param`` the prompt field (``messages`` or ``prompt``).
    """
    what = "messages" if prompt_param == "messages" else "prompt"
    if prompt_tokens >= max_model_len:  # messages naming parameters through the namer (Responses renames)
        raise bad_request(
            lambda n: f"This model's maximum context length is {max_model_len} tokens. However, your {n(what)} "
                      f"resulted in {prompt_tokens} tokens. Please reduce the length of the {n(what)}.",
            param=prompt_param, code="context_length_exceeded",
        )
    if requested is None:
        return max_model_len - prompt_tokens
    if prompt_tokens + requested > max_model_len:
        raise bad_request(
            lambda n: f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                      f"{prompt_tokens + requested} tokens ({prompt_tokens} in the {n(what)}, {requested} in the "
                      f"completion). Please reduce the length of the {n(what)} or '{n(param)}'.",
            param=param, code="context_length_exceeded",
        )
    return requested


class GenerationTimer:
    """Records TTFT, inter-token latency, queue time and token counters.

    Inter-token latencies are observed in bulk (``metrics.observe_many``), every
    ``ITL_BATCH`` chunks and at :meth:`close`: one histogram observation per streamed token
    was a lock and two counter updates on the per-token path. A scrape sees a running
    request's latest latencies at most ``ITL_BATCH`` chunks late.
    """

    ITL_BATCH = 64

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.last: float | None = None
        self._waiting = True
        self._itl: list[float] = []
        metrics.WAITING.inc()

    def _stop_waiting(self) -> None:
        if self._waiting:
            self._waiting = False
            metrics.WAITING.dec()

    def on_chunk(self, c: TokenChunk) -> None:
        now = time.perf_counter()
        if c.queue_seconds is not None:
            metrics.QUEUE_TIME.observe(c.queue_seconds)
        if c.num_tokens <= 0:
            return
        last, self.last = self.last, now
        if last is None:
            self._first(now)
            return
        itl = self._itl
        itl.append((now - last) / c.num_tokens)
        if len(itl) >= self.ITL_BATCH:
            self._flush_itl()

    def on_stamps(self, stamps: list[float], counts: list[int]) -> None:
        """Chunks clocked by the caller (a lane, server/plan/lanes.py): chunk ``i``, of ``counts[i]`` > 0
        tokens, came at ``stamps[i]`` (``time.perf_counter``), after every chunk seen before; the same
        latencies as one :meth:`on_chunk` each, without a call per chunk."""
        itl = self._itl
        for now, n in zip(stamps, counts, strict=True):
            last, self.last = self.last, now
            if last is None:
                self._first(now)
            else:
                itl.append((now - last) / n)
        if len(itl) >= self.ITL_BATCH:
            self._flush_itl()

    def _first(self, now: float) -> None:
        self._stop_waiting()
        metrics.TTFT.observe(now - self.start)

    def _flush_itl(self) -> None:
        values, self._itl = self._itl, []
        metrics.observe_many(metrics.ITL, values)

    def close(self) -> None:
        """Call once the request ends, however it ends."""
        self._stop_waiting()
        self._flush_itl()

    def record(self, prompt_tokens: int, completion_tokens: int) -> None:
        metrics.PROMPT_TOKENS.inc(prompt_tokens)
        metrics.COMPLETION_TOKENS.inc(completion_tokens)


def logit_bias(req: object, vocab_size: int) -> tuple[tuple[int, float], ...]:
    """The request's ``logit_bias`` by token id; 400 naming ``logit_bias`` for an unknown id."""
    try:
        return req.logit_bias_ids(vocab_size)  # type: ignore[attr-defined]
    except ValueError as exc:
        raise bad_request(f"Invalid value for 'logit_bias': {exc}.", param="logit_bias", code="invalid_value") from exc
