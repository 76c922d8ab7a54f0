"""Loop breaker: a JSON value the model repeats without end is closed where the grammar allows.

Under a grammar, a small model at temperature 0 can fall into a loop inside one JSON value:
``["booking", "booking", ...]``, ``[1.0, 1.0, ...]``, ``"pineapple_pineapple_..."``. The grammar
keeps every token valid, so nothing stops it before ``max_tokens``: the call is cut, the
client gets ``finish_reason: "length"`` and no call, and the tokens were spent for nothing.

This vLLM logits processor (run in the engine, next to the grammar mask) watches the output
tokens of requests that opt in (``extra_args[EXTRA_ARG]``, set by the adapter for JSON
constraints). When the tail of the output is periodic (one cycle of at most ``MAX_PERIOD``
tokens repeated ``MIN_REPEATS`` times, spanning at least ``MIN_SPAN`` tokens) and lies inside
a JSON container, that container is closed:

* an array or object: at the point where the model would write the separator for one more
  element (its preferred allowed token starts with ``,``), only closing tokens (``]`` / ``}``)
  stay allowed, so the value ends after a whole element, never inside a number or string;
* a string: after a whole number of cycles, only tokens starting with ``"`` stay allowed.

Only tokens the grammar already allows are ever chosen (the grammar's mask is applied before
this processor: disallowed tokens are ``-inf``), so the output stays valid. If no closing
token is allowed at that point, nothing changes there. The repeats the model wrote stay in
the value: the breaker shortens a loop, it never writes a value of its own.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from server.lru import BoundedLRU

if TYPE_CHECKING:
    import torch
    import xgrammar as xgr
    from vllm.config import VllmConfig
    from vllm.sampling_params import SamplingParams

__all__ = [
    "CHECK_EVERY",
    "EXTRA_ARG",
    "MAX_PERIOD",
    "MIN_REPEATS",
    "MIN_SPAN",
    "FQCN",
    "JsonDepth",
    "LoopBreaker",
    "LoopBreakerProcessor",  # noqa: F822 - made on first access by the module __getattr__ below
    "ClosingTokens",
    "closes",
    "find_loop",
    "vocab_bytes",
    "wants_another_element",
]

log = logging.getLogger("gramserve.engine")

EXTRA_ARG = "gramserve_break_loops"  # SamplingParams.extra_args key that turns it on per request
FQCN = "server.engine.loop_breaker:LoopBreakerProcessor"  # as vLLM's ``logits_processors`` loads it
MAX_PERIOD = 32  # longest cycle looked for, in tokens
MIN_REPEATS = 16  # a cycle seen this many times in a row is a loop (a 10x10 board of zeros is not)
MIN_SPAN = 48  # ... and the repeats cover at least this many tokens
CHECK_EVERY = 8  # tokens between two looks for a loop (a loop is found at most this late)

_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_OPEN = {ord("["): ord("]"), ord("{"): ord("}")}
_CLOSE = {v: k for k, v in _OPEN.items()}
_WS = b" \t\r\n"

#: Token ids as the logits are indexed: a list, or (in the engine) a tensor on the logits' device.
_TokenIds: TypeAlias = "list[int] | torch.Tensor"


class JsonDepth:
    """Open JSON containers (``[``, ``{``, and ``"`` for a string) after each byte fed.

    Text before the first ``{`` / ``[`` (a tool-call marker, prose) is outside JSON: its
    quotes are not strings. When the outermost container closes, it is outside again.
    """

    __slots__ = ("stack", "low", "_escape")

    def __init__(self) -> None:
        self.stack: list[int] = []
        self.low = 0  # the fewest open containers since it was last set (a close shows even if reopened)
        self._escape = False

    def feed(self, data: bytes) -> None:
        stack = self.stack
        for b in data:
            if stack and stack[-1] == _QUOTE:
                if self._escape:
                    self._escape = False
                elif b == _BACKSLASH:
                    self._escape = True
                elif b == _QUOTE:
                    stack.pop()
                    self.low = min(self.low, len(stack))
            elif b == _QUOTE:
                if stack:
                    stack.append(_QUOTE)
            elif b in _OPEN:
                stack.append(b)
            elif b in _CLOSE and stack and stack[-1] == _CLOSE[b]:
                stack.pop()
                self.low = min(self.low, len(stack))


def find_loop(ids: Sequence[int]) -> tuple[int, int] | None:
    """``(period, span)`` when the last ``span`` tokens of ``ids`` repeat one short cycle: a loop.

    The shortest period wins; ``span`` reaches back as far as the repetition goes.
    """
    n = len(ids)
    for p in range(1, MAX_PERIOD + 1):
        need = max(MIN_REPEATS * p, MIN_SPAN)
        if need > n:
            return None
        if ids[n - 1] != ids[n - 1 - p] or ids[n - 2] != ids[n - 2 - p]:  # most periods fail here, cheaply
            continue
        tail = ids[n - need:]
        if tail[p:] == tail[:-p]:
            span = need
            while span < n and ids[n - span - 1] == ids[n - span - 1 + p]:
                span += 1
            return p, span
    return None


def closes(token: bytes, closing: bytes, *, in_string: bool) -> bool:
    """Whether ``token`` starts by writing (a prefix of) ``closing``, at least its first byte.

    Whitespace may sit between closing bytes, and before the first one unless the innermost
    container is a string (there it would be text). After the whole sequence, anything goes.
    """
    i = 0
    for b in token:
        if i == len(closing):
            return True
        if b == closing[i]:
            i += 1
        elif b not in _WS or (i == 0 and in_string):
            return False
    return i >= 1


class ClosingTokens:
    """Per process: the token ids that write each closing sequence, computed once (bounded)."""

    def __init__(self, vocab: Sequence[bytes], *, to_ids: Callable[[list[int]], _TokenIds] = list,
                 max_entries: int = 64) -> None:
        self._vocab = vocab
        self._to_ids = to_ids  # list -> the logits' index type (a tensor on their device)
        self._cache: BoundedLRU[tuple[bytes, bool], _TokenIds] = BoundedLRU(max_entries=max_entries)

    def ids(self, closing: bytes, *, in_string: bool) -> _TokenIds:
        key = (closing, in_string)
        found = self._cache.get(key)
        if found is None:
            found = self._to_ids([i for i, t in enumerate(self._vocab) if t and closes(t, closing, in_string=in_string)])
            self._cache.put(key, found)
        return found


_CLOSER = {_QUOTE: _QUOTE, ord("["): ord("]"), ord("{"): ord("}")}
_KIND = {_QUOTE: "string", ord("["): "array", ord("{"): "object"}


def wants_another_element(stack: Sequence[int], escape: bool, token: bytes, depth: int) -> bool:
    """Whether writing ``token`` from this state reaches ``depth`` open containers and then a ``,``."""
    probe = JsonDepth()
    probe.stack = list(stack)
    probe._escape = escape
    at_depth = len(stack) == depth
    for b in token:
        if at_depth and b not in _WS:
            return b == ord(",")
        probe.feed(bytes((b,)))
        at_depth = len(probe.stack) == depth
    return False


class LoopBreaker:
    """Per request: follows the output tokens and closes a looping JSON value (see module doc).

    Called by vLLM with the request's output token ids (a live list) and its logits row.
    """

    def __init__(self, vocab: Sequence[bytes], closing: ClosingTokens) -> None:
        self._vocab = vocab
        self._closing = closing
        self._json = JsonDepth()
        self._depths: list[int] = []  # open containers after each output token
        self._seen = 0
        # While closing: (depth of the container to close, period, first token of the loop)
        self._target: tuple[int, int, int] | None = None
        self.broken = 0

    def __call__(self, output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        self._follow(output_ids)
        if self._target is None:
            return logits
        depth, period, start = self._target
        stack = self._json.stack
        if self._json.low < depth:  # closed (by us or by the model), even if a new one opened since
            self._target = None
            return logits
        if stack[depth - 1] == _QUOTE:  # a string: end it after a whole number of cycles
            if (self._seen - start) % period:
                return logits
        else:  # an array or object: end it where the model would start one more element
            preferred = self._vocab[int(logits.argmax())]
            if not wants_another_element(stack, self._json._escape, preferred, depth):
                return logits
        closing = bytes(_CLOSER[c] for c in reversed(stack[depth - 1:]))
        ids = self._closing.ids(closing, in_string=stack[-1] == _QUOTE)
        import torch

        allowed = logits[ids]
        if not bool(torch.isfinite(allowed).any()):  # the grammar allows no close here
            return logits
        row = torch.full_like(logits, float("-inf"))
        row[ids] = allowed
        return row

    def _follow(self, output_ids: list[int]) -> None:
        """Feed the tokens not seen yet (up to a placeholder of async scheduling, if any)."""
        vocab, depths, json_depth = self._vocab, self._depths, self._json
        n = self._seen
        while n < len(output_ids):
            tok = output_ids[n]
            if tok < 0:
                break
            if tok < len(vocab):
                json_depth.feed(vocab[tok])
            depths.append(len(json_depth.stack))
            n += 1
            if self._target is None and n % CHECK_EVERY == 0:
                self._seen = n
                self._check(output_ids)
        self._seen = n

    def _check(self, output_ids: list[int]) -> None:
        n = self._seen
        found = find_loop(output_ids[:n] if len(output_ids) > n else output_ids)
        if found is None:
            return
        p, span = found  # tokens n-span .. n-1 repeat with period p
        before = self._depths[n - span - 1] if n - span - 1 >= 0 else 0
        depth = min(before, *self._depths[n - span:n])
        if depth < 1:  # a loop in prose, outside JSON: not ours to end
            return
        self._target = (depth, p, n - span)
        self._json.low = len(self._json.stack)
        self.broken += 1
        log.warning("loop broken: a %d-token cycle repeated %d times inside a JSON %s; closing it",
                    p, span // p, _KIND[self._json.stack[depth - 1]])


def vocab_bytes(info: xgr.TokenizerInfo, vocab_size: int) -> list[bytes]:
    """Each token id's bytes from an XGrammar ``TokenizerInfo`` (special tokens: empty)."""
    special = set(info.special_token_ids)
    vocab = [b"" if i in special else bytes(t) for i, t in enumerate(info.decoded_vocab)]
    return vocab[:vocab_size] + [b""] * (vocab_size - len(vocab))


def _load_vocab(vllm_config: VllmConfig) -> list[bytes]:
    """The vocabulary as XGrammar's backend in vLLM reads it, from the same tokenizer."""
    import xgrammar as xgr
    from vllm.tokenizers import cached_tokenizer_from_config

    model_config = vllm_config.model_config
    vocab_size = model_config.get_vocab_size()
    tokenizer = cached_tokenizer_from_config(model_config)
    return vocab_bytes(xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size), vocab_size)


def _processor_class() -> type:
    """vLLM's side, built on first use so that importing this module does not import vLLM."""
    import torch
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

    class LoopBreakerProcessor(AdapterLogitsProcessor):
        """One :class:`LoopBreaker` per request that asks for it (``extra_args[EXTRA_ARG]``)."""

        def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
            super().__init__(vllm_config, device, is_pin_memory)
            try:
                self._vocab: list[bytes] | None = _load_vocab(vllm_config)
            except Exception as exc:  # e.g. a tokenizer XGrammar cannot read: run without the breaker
                log.warning("loop breaker off: cannot read the tokenizer's vocabulary (%s)", exc)
                self._vocab = None
                return
            self._closing = ClosingTokens(
                self._vocab, to_ids=lambda ids: torch.tensor(ids, dtype=torch.long, device=device))

        def is_argmax_invariant(self) -> bool:
            return False

        def new_req_logits_processor(self, params: SamplingParams) -> LoopBreaker | None:
            extra = params.extra_args or {}
            if not extra.get(EXTRA_ARG) or self._vocab is None:
                return None
            return LoopBreaker(self._vocab, self._closing)

    return LoopBreakerProcessor


_built: dict[str, type] = {}


def __getattr__(name: str) -> type:
    if name == "LoopBreakerProcessor":  # what vLLM's FQCN loader asks for
        if name not in _built:
            _built[name] = _processor_class()
        return _built[name]
    raise AttributeError(name)
