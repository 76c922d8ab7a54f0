"""A scripted engine for unit tests of the front end. Never what a user runs.

It "generates" a scripted list of text pieces (one chunk each), so tests can control
exactly how output is split across engine steps, including splits inside markers.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from server.engine.base import EngineAbortedError, EngineDeadError, EngineRequestError, GenerateRequest, TokenChunk, TokenLogprob

__all__ = ["FakeEngine", "CharTokenizer"]


class CharTokenizer:
    """One token per character (code point); enough to count and round-trip."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)

    def __len__(self) -> int:
        return 0x110000


Script = Callable[[GenerateRequest], list[str]]


@dataclass
class FakeEngine:
    script: Script = lambda req: ["Hello", " world", "!"]
    model_name: str = "fake-model"
    max_model_len: int = 4096
    tokenizer: CharTokenizer = field(default_factory=CharTokenizer)
    delay: float = 0.0
    dead: bool = False
    aborted: list[str] = field(default_factory=list)
    requests: list[GenerateRequest] = field(default_factory=list)
    vocab_size: int = 0x110000
    metrics_flushes: int = 0  # flush_metrics calls (before each /metrics read)

    def is_dead(self) -> bool:
        return self.dead

    async def generate(self, req: GenerateRequest) -> AsyncIterator[TokenChunk]:
        if self.dead:
            raise EngineDeadError("fake engine is dead")
        self.requests.append(req)
        pieces = self.script(req)
        for index in range(req.sampling.n):
            budget = req.sampling.max_tokens
            first = True
            for i, piece in enumerate(pieces):
                if self.delay:
                    await asyncio.sleep(self.delay)
                if self.dead:
                    raise EngineDeadError("fake engine died mid-request")
                if req.request_id in self.aborted:  # as vLLM: an aborted request ends with an abort
                    raise EngineAbortedError(f"request {req.request_id} was aborted")
                ntok = len(piece)
                if ntok >= budget:
                    piece, ntok = piece[:budget], budget
                budget -= ntok
                last = budget == 0 or i == len(pieces) - 1
                lps = tuple(TokenLogprob(token=ch, logprob=-0.5, bytes=list(ch.encode()), top=())
                            for ch in piece) if req.sampling.logprobs is not None else ()
                yield TokenChunk(index=index, text=piece, num_tokens=ntok,
                                 finish_reason=("length" if budget == 0 else "stop") if last else None,
                                 logprobs=lps, prompt_tokens=len(req.prompt_token_ids) if first else 0)
                first = False
                if last:
                    break

    def validate(self, req: GenerateRequest) -> None:
        """Refuses what the real adapter refuses that tests exercise: a negative seed marker."""
        if req.sampling.seed == -1:
            raise EngineRequestError("seed -1 is refused by this fake engine (tests the mapping to a 400).")

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    async def check_health(self) -> None:
        if self.dead:
            raise EngineDeadError("fake engine is dead")

    def flush_metrics(self) -> None:
        self.metrics_flushes += 1

    async def shutdown(self) -> None:
        return None
