"""Token budgets and per-request timing shared by chat and text completions."""
from __future__ import annotations

import time

from . import metrics
from .engine.base import TokenChunk
from .errors import bad_request

__all__ = ["GenerationTimer", "check_context", "resolve_max_tokens"]


def resolve_max_tokens(max_model_len: int, prompt_tokens: int, requested: int | None, *, param: str) -> int:
    """The completion budget: what was asked, or all the context left."""
    if prompt_tokens >= max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, your messages "
            f"resulted in {prompt_tokens} tokens. Please reduce the length of the messages.",
            param="messages", code="context_length_exceeded",
        )
    if requested is None:
        return max_model_len - prompt_tokens
    return requested


def check_context(max_model_len: int, prompt_tokens: int, max_tokens: int) -> None:
    if prompt_tokens + max_tokens > max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
            "completion). Please reduce the length of the messages or completion.",
            param="max_tokens", code="context_length_exceeded",
        )


class GenerationTimer:
    """Records TTFT, inter-token latency, queue time and token counters."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.last: float | None = None
        self._waiting = True
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
        self._stop_waiting()
        if self.last is None:
            metrics.TTFT.observe(now - self.start)
        else:
            metrics.ITL.observe((now - self.last) / c.num_tokens)
        self.last = now

    def close(self) -> None:
        """Call once the request ends, however it ends."""
        self._stop_waiting()

    def record(self, prompt_tokens: int, completion_tokens: int) -> None:
        metrics.PROMPT_TOKENS.inc(prompt_tokens)
        metrics.COMPLETION_TOKENS.inc(completion_tokens)
