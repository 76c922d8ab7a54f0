"""The engine interface the front end talks to: our own small types, not vLLM's.

The real adapter (``server.engine.vllm_engine``) and the scripted fake used by unit
tests (``server.engine.fake``) both implement :class:`Engine`.
"""
from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from vllm.tokenizers import TokenizerLike

    from server.structured.constraints import Constraint

__all__ = [
    "Engine",
    "EngineDeadError",
    "EngineRequestError",
    "GenerateRequest",
    "Sampling",
    "TokenChunk",
    "TopLogprob",
    "TokenLogprob",
]


class EngineDeadError(RuntimeError):
    """The engine process died; the server must report 503 and exit."""


class EngineAbortedError(RuntimeError):
    """The engine stopped a request before it finished (an abort: shutdown cut, client gone)."""


class EngineRequestError(ValueError):
    """The engine refused a request (bad parameter it alone can check)."""


@dataclass(frozen=True)
class Sampling:
    """Sampling options in OpenAI terms (mapped to vLLM by the adapter)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: int | None = None  # None: off; k>=0: chosen token + k alternatives
    ignore_eos: bool = False
    # False when the output must keep special tokens as text: a family whose tool-call markers
    # are special tokens (Mistral's [TOOL_CALLS] in v3+ tokenizers) needs them for its parser.
    skip_special_tokens: bool = True
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias added to its logit)


@dataclass(frozen=True)
class GenerateRequest:
    request_id: str
    prompt_token_ids: list[int]
    sampling: Sampling
    constraint: Constraint | None = None


@dataclass(frozen=True)
class TopLogprob:
    token: str
    logprob: float
    bytes: list[int]


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float
    bytes: list[int]
    top: tuple[TopLogprob, ...]


@dataclass(slots=True)
class TokenChunk:
    """New output of one choice since the last chunk (delta semantics). Made once per token and
    never changed after: slots and no ``frozen`` (a frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__``, 0.85 against 0.18 µs a chunk here)."""

    index: int
    text: str
    num_tokens: int  # tokens generated in this chunk
    finish_reason: str | None = None  # "stop" | "length" | None (still running)
    logprobs: tuple[TokenLogprob, ...] = ()
    prompt_tokens: int = 0
    queue_seconds: float | None = None


@runtime_checkable
class Engine(Protocol):
    model_name: str
    max_model_len: int
    tokenizer: TokenizerLike  # HF-style: encode(text, add_special_tokens=False), decode(ids)
    vocab_size: int  # the model's output width (may exceed the tokenizer's length)

    def is_dead(self) -> bool:
        """True once the engine can no longer serve (checked often: must be cheap)."""

    def validate(self, req: GenerateRequest) -> None:
        """Raise :class:`EngineRequestError` for values the engine would refuse, before any
        response starts (a stream could only report it as an error event)."""

    def generate(self, req: GenerateRequest) -> AsyncIterator[TokenChunk]:
        """Yield chunks for all ``n`` choices until each finished."""

    async def abort(self, request_id: str) -> None: ...

    async def check_health(self) -> None:
        """Raise :class:`EngineDeadError` when the engine cannot serve."""

    def flush_metrics(self) -> None:
        """Bring the engine's own Prometheus metrics up to date (called before ``/metrics`` is read)."""

    async def shutdown(self) -> None: ...
