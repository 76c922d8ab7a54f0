"""Budget-aware closing without the engine: a random "model" writes under the real grammar.

``simulate`` drives vLLM's own grammar objects (XGrammar's, or llguidance's) wrapped in
gramserve's :class:`~server.engine.budget_grammar.BudgetGrammar`, exactly as vLLM's scheduler
does (fill the mask, sample, accept), with a sampler that picks any allowed token at random.
A random writer never finishes on its own, so every answer depends on the closing: the unit
tests sweep budgets with it, and ``python -m bench.budget_close`` prints the per-token cost of
the budget check next to the plain grammar's (the mask fill), on the same token sequences.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Sim", "Simulated", "simulate"]


@dataclass
class Simulated:
    text: str
    finish: str  # "stop" | "length"
    tokens: list[int]
    fill_seconds: list[float]


class Sim:
    """One tokenizer's XGrammar compiler, vocabulary tables and stop token (per process)."""

    def __init__(self, tokenizer: Any) -> None:
        import xgrammar as xgr

        from server.engine.budget_grammar import BudgetTables

        self.tokenizer = tokenizer
        self._ll_tokenizer: Any = None
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer)
        self.compiler = xgr.GrammarCompiler(self.info)
        self.vocab_size = self.info.vocab_size
        self.words = (self.vocab_size + 31) // 32
        self.token_bytes = [bytes(t) for t in self.info.decoded_vocab]
        self.stop = list(self.info.stop_token_ids)
        # a model writes no raw C0 control bytes but newlines (XGrammar lets tab and others through inside strings)
        self.control = {t for t, b in enumerate(self.token_bytes) if any(c < 32 and c not in b"\n\r" for c in b)}
        self.tables = BudgetTables(self.token_bytes, special=list(self.info.special_token_ids), words=self.words)

    def guidance_grammar(self, schema: Any, *, max_tokens: int | None) -> Any:
        """vLLM's GuidanceGrammar (llguidance) for a JSON ``schema``, behind a budget when given."""
        import llguidance as llg
        import llguidance.hf
        from vllm.v1.structured_output.backend_guidance import GuidanceGrammar

        from server.engine.budget_grammar import make_budget_grammar
        from server.engine.budget_plan import BudgetHeader

        if self._ll_tokenizer is None:
            self._ll_tokenizer = llguidance.hf.from_tokenizer(self.tokenizer, self.vocab_size)
        grammar = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema),
                                                         defaults={"whitespace_flexible": False})
        inner = GuidanceGrammar(ll_matcher=llg.LLMatcher(self._ll_tokenizer, grammar), ll_tokenizer=self._ll_tokenizer,
                                vocab_size=self.vocab_size)
        if max_tokens is None:
            return inner
        return make_budget_grammar(inner, BudgetHeader(max_tokens=max_tokens, kind="grammar"), self.tables, self.stop)

    def grammar(self, kind: str, spec: Any, *, max_tokens: int | None, closers: tuple[str, ...] = ()) -> Any:
        """vLLM's XgrammarGrammar for ``spec`` (``kind``: "json" or "structural_tag"), behind a
        budget when ``max_tokens`` is given."""
        import xgrammar as xgr
        from vllm.v1.structured_output.backend_xgrammar import XgrammarGrammar

        from server.engine.budget_grammar import make_budget_grammar
        from server.engine.budget_plan import BudgetHeader

        text = spec if isinstance(spec, str) else json.dumps(spec)
        ctx = self.compiler.compile_json_schema(text) if kind == "json" else self.compiler.compile_structural_tag(text)
        inner = XgrammarGrammar(matcher=xgr.GrammarMatcher(ctx, override_stop_tokens=self.stop),
                                vocab_size=self.vocab_size, ctx=ctx)
        if max_tokens is None:
            return inner
        return make_budget_grammar(inner, BudgetHeader(max_tokens=max_tokens, kind=kind, closers=closers),
                                   self.tables, self.stop)


def _allowed(row: Any) -> list[int]:
    import numpy as np

    bits = np.unpackbits(row.numpy().view(np.uint8), bitorder="little")
    return np.flatnonzero(bits).tolist()


def simulate(sim: Sim, grammar: Any, *, max_tokens: int, rng: random.Random, p_stop: float = 0.3,
             pick: Callable[[list[int], random.Random], int] | None = None) -> Simulated:
    """Write under ``grammar`` until a stop token or ``max_tokens``, as vLLM's scheduler would."""
    import xgrammar as xgr

    bitmask = xgr.allocate_token_bitmask(1, sim.vocab_size)
    out: list[int] = []
    fills: list[float] = []
    finish = "length"
    for _ in range(max_tokens):
        start = time.perf_counter()
        grammar.fill_bitmask(bitmask, 0)
        fills.append(time.perf_counter() - start)
        allowed = _allowed(bitmask[0])
        stops = [t for t in allowed if t in sim.stop]
        if stops and (len(stops) == len(allowed) or rng.random() < p_stop):
            finish = "stop"
            break
        choices = [t for t in allowed if t not in sim.stop and t not in sim.control] or \
            [t for t in allowed if t not in sim.stop]  # a forced token is taken whatever it is
        token = pick(choices, rng) if pick is not None else rng.choice(choices)
        if not grammar.accept_tokens("sim", [token]):
            raise AssertionError(f"the grammar refused token {token} it allowed")
        out.append(token)
    text = b"".join(sim.token_bytes[t] for t in out).decode("utf-8", errors="replace")
    return Simulated(text, finish, out, fills)


def _cost_table(sim: Sim, schemas: list[Any], *, budget: int, seed: int) -> list[tuple[str, float, float, float]]:
    """Mask-fill time per token, plain grammar against the budgeted one, on the same tokens."""
    rows = []
    for i, schema in enumerate(schemas):
        rng = random.Random(seed + i)
        run = simulate(sim, sim.grammar("json", schema, max_tokens=budget), max_tokens=budget, rng=rng)
        plain = sim.grammar("json", schema, max_tokens=None)
        import xgrammar as xgr

        bitmask = xgr.allocate_token_bitmask(1, sim.vocab_size)
        plain_fills = []
        for token in run.tokens:
            start = time.perf_counter()
            plain.fill_bitmask(bitmask, 0)
            plain_fills.append(time.perf_counter() - start)
            plain.accept_tokens("sim", [token])
        far = run.fill_seconds[: max(1, len(run.fill_seconds) // 2)]
        rows.append((f"schema {i}", statistics.median(plain_fills) * 1e6, statistics.median(far) * 1e6,
                     statistics.median(run.fill_seconds[len(far):] or far) * 1e6))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from server.default_model import ensure_default_model

    sim = Sim(AutoTokenizer.from_pretrained(str(ensure_default_model())))
    from tests.unit.budget_cases import SCHEMAS

    print(f"mask fill per token (us), SmolLM2 vocabulary, budget {args.budget}, random writer")
    print("| schema | plain grammar | budgeted, first half | budgeted, second half |")
    print("| --- | ---: | ---: | ---: |")
    for name, plain, far, near in _cost_table(sim, list(SCHEMAS.values()), budget=args.budget, seed=args.seed):
        print(f"| {name} | {plain:.0f} | {far:.0f} | {near:.0f} |")


if __name__ == "__main__":
    main()
