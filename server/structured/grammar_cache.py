"""Compile constraints with XGrammar before a request reaches vLLM, and remember the outcome.

vLLM compiles grammars asynchronously inside the engine; a schema that fails (or takes
forever) there surfaces late and badly. Compiling here first, with the same tokenizer info
and the same xgrammar calls as the engine's backend (vLLM's ``XgrammarBackend.compile_grammar``, with
gramserve's bounded-string fix: ``server/engine/xgrammar_json.py``), turns those into
a 400 at request time (or a start-up error with ``--precompile``). Outcomes are cached in a
bounded LRU keyed by the constraint; only metadata is kept, not the compiled grammar (vLLM
keeps its own compiled copy in the engine process).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING

from server.engine.vllm_plugin import lower_thread_priority
from server.engine.xgrammar_json import JSON_OBJECT_SCHEMA, fixed_ebnf
from server.loop_budget import may_block
from server.lru import BoundedLRU
from server.structured.constraints import JSON_OBJECT, Constraint, _is_lark
from server.structured.errors import GRAMMAR_ERRORS, grammar_error_message

if TYPE_CHECKING:  # pragma: no cover
    import llguidance as llg
    import xgrammar as xgr
    from transformers import PreTrainedTokenizerBase

    from server.engine.budget_plan import ByteMatcher, Vocab

__all__ = ["CompileResult", "GrammarCache", "compile_constraint", "guidance_compile_error", "tokenizer_info_from_hf"]


@dataclass(frozen=True)
class CompileResult:
    ok: bool
    seconds: float
    cached: bool
    error: str | None = None


def tokenizer_info_from_hf(tokenizer: PreTrainedTokenizerBase, *, vocab_size: int | None = None) -> xgr.TokenizerInfo:
    """``xgrammar.TokenizerInfo`` built exactly as vLLM's xgrammar backend builds it for a
    Hugging Face tokenizer. Pass the model's vocab size (``model_config.get_vocab_size()``,
    i.e. the lm_head width) when it differs from the tokenizer's."""
    import xgrammar as xgr

    return xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)


def _choice_ebnf(choices: tuple[str, ...] | list[str]) -> str:
    """vLLM's ``choice_as_grammar``."""
    escapes = {"\\": r"\\", '"': r"\"", "\n": r"\n", "\r": r"\r", "\t": r"\t"}

    def esc(s: str) -> str:
        return "".join(
            escapes.get(ch) or (f"\\u{ord(ch):04x}" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch) for ch in s
        )

    return "root ::= " + " | ".join(f'"{esc(c)}"' for c in choices)


def compile_constraint(compiler: xgr.GrammarCompiler, constraint: Constraint, *,
                       disable_any_whitespace: bool = False) -> xgr.CompiledGrammar:
    """Compile ``constraint`` with an ``xgrammar.GrammarCompiler`` the way vLLM 0.32 does, with the engine's
    changes (``server/engine/hybrid_backend.py``): bounded strings and compact any-values fixed
    (``server/engine/xgrammar_json.py``)."""
    import json

    separators = (",", ":") if disable_any_whitespace else None
    kind, value = constraint.kind, constraint.value
    if kind in ("json", "structural_tag"):  # (bounded strings fixed as the engine's backend fixes them)
        text = value if isinstance(value, str) else json.dumps(value)
        fixed = fixed_ebnf(kind, text, any_whitespace=not disable_any_whitespace, separators=separators)
        if fixed is not None:
            return compiler.compile_grammar(fixed)
        if kind == "json":
            return compiler.compile_json_schema(text, any_whitespace=not disable_any_whitespace, separators=separators)
        return compiler.compile_structural_tag(text)
    if kind == "json_object":  # (only its any-value's separators can need a fix: with whitespace off)
        fixed = fixed_ebnf("json", JSON_OBJECT_SCHEMA, any_whitespace=False, separators=separators) \
            if disable_any_whitespace else None
        if fixed is not None:
            return compiler.compile_grammar(fixed)
        return compiler.compile_json_schema(
            JSON_OBJECT_SCHEMA, any_whitespace=not disable_any_whitespace, separators=separators
        )
    if kind == "regex":
        return compiler.compile_regex(value)
    if kind == "choice" and isinstance(value, tuple):  # always its tuple of texts
        return compiler.compile_grammar(_choice_ebnf(value))
    if kind == "grammar" and isinstance(value, str):  # always its text
        return compiler.compile_lark(value) if _is_lark(value) else compiler.compile_grammar(value)
    raise ValueError(f"unknown constraint kind {kind!r}")


def guidance_compile_error(schema_json: str, *, disable_any_whitespace: bool = False) -> str | None:
    """llguidance's verdict on a JSON schema, as the engine's hybrid backend compiles it (None: it
    compiles). llguidance builds token masks lazily, while generating, so no vocabulary is needed."""
    import llguidance as llg

    try:
        grammar = llg.LLMatcher.grammar_from_json_schema(
            schema_json, defaults={"whitespace_flexible": not disable_any_whitespace})
        error = llg.LLMatcher.validate_grammar(grammar)
    except GRAMMAR_ERRORS as exc:  # a schema llguidance cannot read
        return f"llguidance: {exc}"
    return f"llguidance: {error}" if error else None


class GrammarCache:
    """Thread-safe, bounded LRU of compile outcomes, with a compile timeout.

    ``tokenizer_info`` is an ``xgrammar.TokenizerInfo`` or a zero-argument factory returning one
    (built on first use, so the server can start the cache before the tokenizer is loaded).
    """

    def __init__(
        self,
        tokenizer_info: xgr.TokenizerInfo | Callable[[], xgr.TokenizerInfo],
        *,
        max_entries: int = 256,
        compile_timeout_s: float = 10.0,
        disable_any_whitespace: bool = False,
        max_stuck: int = 4,
        cache_limit_bytes: int = 256 * 1024 * 1024,
        max_key_chars: int = 64 << 20,
    ) -> None:
        self._info_source = tokenizer_info
        self._compiler: xgr.GrammarCompiler | None = None
        self.max_entries = max_entries
        self.compile_timeout_s = compile_timeout_s
        self.disable_any_whitespace = disable_any_whitespace
        self.max_stuck = max_stuck
        self.cache_limit_bytes = cache_limit_bytes
        # Keys are constraint texts (client schemas): bounded in their total size too.
        self._entries: BoundedLRU[str, CompileResult] = BoundedLRU(max_entries=max_entries, max_chars=max_key_chars)
        self._inflight: dict[str, Future[CompileResult]] = {}
        self._lock = threading.Lock()
        # Keys whose compile outlived the timeout and still runs (xgrammar cannot be
        # interrupted). Each compile has its own daemon thread, so these never delay other
        # compiles; at most ``max_stuck`` may run at once.
        self._stuck: set[str] = set()
        # budget-aware closing: the shortest answer's tokens per constraint (-1: none found)
        self._mins: BoundedLRU[str, int] = BoundedLRU(max_entries=max_entries, max_chars=max_key_chars)
        self._vocab_table: Vocab | None = None
        self._ll_tok: llg.LLTokenizer | None = None

    @property
    def compiler(self) -> xgr.GrammarCompiler:
        """The ``xgrammar.GrammarCompiler`` (created on first use)."""
        with self._lock:
            if self._compiler is None:
                import xgrammar as xgr

                info = self._info_source
                if not isinstance(info, xgr.TokenizerInfo):
                    info = info()
                # Bounded: xgrammar's own cache of compiled grammars is unlimited by default.
                self._compiler = xgr.GrammarCompiler(info, max_threads=8, cache_enabled=True,
                                                     cache_limit_bytes=self.cache_limit_bytes)
            return self._compiler

    def __len__(self) -> int:
        return len(self._entries)

    def _run(self, constraint: Constraint) -> CompileResult:
        start = time.perf_counter()
        if constraint.backend == "llguidance":
            error = guidance_compile_error(constraint.text, disable_any_whitespace=self.disable_any_whitespace)
            return CompileResult(error is None, time.perf_counter() - start, False, error)
        try:
            compile_constraint(self.compiler, constraint, disable_any_whitespace=self.disable_any_whitespace)
        except GRAMMAR_ERRORS as exc:  # xgrammar reports every compile failure as an exception
            return CompileResult(False, time.perf_counter() - start, False, grammar_error_message(exc))
        return CompileResult(True, time.perf_counter() - start, False, None)

    def compile(self, constraint: Constraint) -> CompileResult:
        """Compile (or recall) ``constraint``. Every failure is a result with ok=False and the
        reason: xgrammar's error, not compiled in time, or the compiler busy with slow ones."""
        key = constraint.key
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                return CompileResult(hit.ok, 0.0, True, hit.error)
            if key in self._stuck:
                return self._too_slow()
            may_block()  # a compile (or waiting for one): never on the event loop
            future = self._inflight.get(key)
            if future is None:
                if len(self._stuck) >= self.max_stuck:
                    return CompileResult(False, 0.0, False,
                                         f"The grammar compiler is busy with {len(self._stuck)} schemas that "
                                         f"exceeded {self.compile_timeout_s:g} s; retry later with a simpler schema.")
                future = Future()
                self._inflight[key] = future
                threading.Thread(
                    target=self._work, args=(key, constraint, future), name="grammar-compile", daemon=True
                ).start()
        try:
            return future.result(timeout=self.compile_timeout_s)
        except FutureTimeout:
            with self._lock:
                if key in self._inflight:
                    self._stuck.add(key)
                    return self._too_slow()
            return future.result()  # finished between the timeout and the lock

    def _work(self, key: str, constraint: Constraint, future: Future[CompileResult]) -> None:
        lower_thread_priority()  # xgrammar's compile threads inherit it: streams keep their cores
        try:
            result = self._run(constraint)
        except BaseException as exc:  # pragma: no cover - _run already catches compile errors
            result = CompileResult(False, 0.0, False, f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._inflight.pop(key, None)
            self._stuck.discard(key)  # finished after all: its outcome is cached like any other
            self._entries.put(key, result)
        future.set_result(result)

    def _too_slow(self) -> CompileResult:
        return CompileResult(False, self.compile_timeout_s, False,
                             f"The schema / grammar is too complex to compile within {self.compile_timeout_s:g} s; "
                             "simplify it (fewer alternatives, shallower nesting, smaller repetition bounds).")

    def min_tokens(self, constraint: Constraint) -> int | None:
        """The fewest tokens a complete answer under ``constraint`` takes (budget-aware closing's
        floor: ``server/structured/budget.py``), worked out once per constraint and remembered;
        None when no ending is found (then no floor is enforced)."""
        key = constraint.key + "\x00" + "\x00".join(constraint.closers)
        hit = self._mins.get(key)
        if hit is not None:
            return hit if hit >= 0 else None
        may_block()
        found = self._min_tokens(constraint)
        self._mins.put(key, -1 if found is None else found)
        return found

    def _min_tokens(self, constraint: Constraint) -> int | None:
        import xgrammar as xgr

        from server.engine.budget_plan import GuidanceBytes, XGrammarBytes, shortest_completion

        info = compile_constraint(self.compiler, JSON_OBJECT).tokenizer_info
        vocab = self._vocab(info)
        if constraint.backend == "llguidance":
            import llguidance as llg

            grammar = llg.LLMatcher.grammar_from_json_schema(
                constraint.text, defaults={"whitespace_flexible": not self.disable_any_whitespace})
            ll_tokenizer = self._ll_tokenizer(info)
            matcher: ByteMatcher = GuidanceBytes(llg.LLMatcher(ll_tokenizer, grammar), vocab, eos=ll_tokenizer.eos_token)
        else:
            compiled = compile_constraint(self.compiler, constraint, disable_any_whitespace=self.disable_any_whitespace)
            matcher = XGrammarBytes(xgr.GrammarMatcher(compiled))
        data = shortest_completion(matcher, constraint.closers, look_ahead=True)
        return None if data is None else vocab.count(data)

    def _vocab(self, info: xgr.TokenizerInfo) -> Vocab:
        from server.engine.budget_plan import Vocab

        with self._lock:
            if self._vocab_table is None:
                self._vocab_table = Vocab([bytes(t) for t in info.decoded_vocab], special=info.special_token_ids)
            return self._vocab_table

    def _ll_tokenizer(self, info: xgr.TokenizerInfo) -> llg.LLTokenizer:
        """An llguidance tokenizer over the same byte strings (built once)."""
        import llguidance as llg

        class _Tokens:  # what llguidance's TokenizerWrapper reads
            def __init__(self) -> None:
                self.tokens = [bytes(t) for t in info.decoded_vocab]
                self.eos_token_id = (list(info.stop_token_ids) or [0])[0]
                self.bos_token_id = None
                self.special_token_ids: list[int] = []

            def __call__(self, text: str | bytes) -> list[int]:
                raise NotImplementedError("the closing walk never tokenizes text")

        with self._lock:
            if self._ll_tok is None:
                self._ll_tok = llg.LLTokenizer(llg.TokenizerWrapper(_Tokens()))
            return self._ll_tok

    def close(self) -> None:
        """Forget cached outcomes (running compiles finish on their own daemon threads)."""
        with self._lock:
            self._entries.clear()
