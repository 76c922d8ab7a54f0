"""Budget-aware closing without the engine: a random "model" writes under the real grammar.

``simulate`` drives vLLM's own grammar objects (XGrammar's, or llguidance's) wrapped in
gramserve's :class:`~server.engine.budget_grammar.BudgetGrammar`, exactly as vLLM's scheduler
does (fill the mask, sample, accept), with a sampler that picks any allowed token at random.
A random writer never finishes on its own, so every answer depends on the closing: the unit
tests sweep budgets with it, and ``python -m bench.budget_close`` prints the per-token cost of
the budget check next to the plain grammar's (the mask fill), on the same token sequences.

The unit tests' budget sweeps live here too (:func:`json_runs`, :func:`tool_runs`,
:func:`guidance_runs`: each constraint from its shortest answer upwards). ``--sweep`` runs them all
and prints the time spent in ``fill_bitmask`` and a digest of every token written; with ``--trees``
several checkouts' ``server/`` run this file's sweeps side by side, alternating, so a change to the
closing reads as "same tokens, less time" (or not)::

    python -m bench.budget_close --sweep --rounds 2 --trees /tmp/base,.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["NOTE_TOOL", "Sim", "Simulated", "floor_tokens", "guidance_runs", "json_runs", "required_calls", "simulate",
           "string_runs", "tool_runs"]


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


def floor_tokens(sim: Sim, grammar: Any, closers: tuple[str, ...] = ()) -> int:
    """The tokens of the shortest whole answer ``grammar`` (a fresh vLLM grammar object) allows."""
    from server.engine.budget_plan import GuidanceBytes, XGrammarBytes, shortest_completion

    if hasattr(grammar, "matcher"):
        matcher: Any = XGrammarBytes(grammar.matcher)
    else:
        try:
            matcher = GuidanceBytes(grammar.ll_matcher, sim.tables.vocab, eos=grammar.ll_tokenizer.eos_token)
        except TypeError:  # an older tree's adapter (--trees), which knew no EOS
            matcher = GuidanceBytes(grammar.ll_matcher, sim.tables.vocab)
    ending = shortest_completion(matcher, closers, look_ahead=True)
    if ending is None:
        raise AssertionError("no ending found from the start")
    count = sim.tables.vocab.count(ending)
    return len(ending) if count is None else count


def json_runs(sim: Sim, sent: Any) -> Iterator[tuple[int, Simulated]]:
    """An XGrammar JSON schema's answers at budgets from its shortest answer upwards."""
    floor = floor_tokens(sim, sim.grammar("json", sent, max_tokens=None))
    for budget in range(floor, floor + 36, 5):
        yield budget, simulate(sim, sim.grammar("json", sent, max_tokens=budget), max_tokens=budget,
                               rng=random.Random(budget), p_stop=0.02)


def required_calls(family: str, tools: list[tuple[str, Any]]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The structural tag of parallel required calls to ``tools`` in ``family``'s format, and its closers."""
    from server.engine.budget_plan import closers_of
    from server.structured.tool_grammar import tool_call_format, tool_formats

    fmt = tool_formats()[family]
    tag = {"type": "structural_tag", "format": tool_call_format(fmt, tools, mode="required", parallel=True)}
    return tag, closers_of(tag, styles=[fmt.arguments_style])


#: A tool with one free string argument (the strings sweep and the unit tests' free-text steps).
NOTE_TOOL = ("note", {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})


def tool_runs(sim: Sim, family: str, tools: list[tuple[str, Any]]) -> Iterator[tuple[int, Simulated]]:
    """Parallel required calls in ``family``'s format, at budgets from the shortest call upwards."""
    tag, closers = required_calls(family, tools)
    floor = floor_tokens(sim, sim.grammar("structural_tag", tag, max_tokens=None), closers)
    for budget in range(floor, floor + 48, 8):
        yield budget, simulate(sim, sim.grammar("structural_tag", tag, max_tokens=budget, closers=closers),
                               max_tokens=budget, rng=random.Random(budget), p_stop=0.05)


#: Bytes a word written inside a string's content never holds (structure, quotes, escapes, markers).
_NOT_IN_WORDS = frozenset(b'"\\<>{}[],:|')


def string_runs(sim: Sim, family: str) -> Iterator[tuple[int, Simulated]]:
    """A required call in ``family``'s format whose one string argument is written in ASCII words
    until the budget closes it: the steps inside a string's content (a real model's long argument)."""
    tag, closers = required_calls(family, [NOTE_TOOL])

    def word(choices: list[int], rng: random.Random) -> int:
        words = [t for t in choices if (b := sim.token_bytes[t]).strip() and b.isascii() and not _NOT_IN_WORDS & set(b)]
        return rng.choice(words or choices)

    for budget in (128, 256):
        yield budget, simulate(sim, sim.grammar("structural_tag", tag, max_tokens=budget, closers=closers),
                               max_tokens=budget, rng=random.Random(budget), p_stop=0.0, pick=word)


def guidance_runs(sim: Sim, sent: Any) -> Iterator[tuple[int, Simulated]]:
    """An llguidance JSON schema's answers at four budgets from its shortest answer."""
    floor = floor_tokens(sim, sim.guidance_grammar(sent, max_tokens=None))
    for budget in (floor, floor + 8, floor + 24, floor + 48):
        yield budget, simulate(sim, sim.guidance_grammar(sent, max_tokens=budget), max_tokens=budget,
                               rng=random.Random(budget), p_stop=0.02)


def _sweep(sim: Sim) -> dict[str, Any]:
    """Every sweep of the unit tests: seconds in fill_bitmask by kind, and a digest of the tokens."""
    from server.structured.tool_grammar import tool_formats
    from tests.unit.budget_cases import TOOLS, guidance_cases, xgrammar_cases

    runs = {"json": [json_runs(sim, sent) for _, sent in xgrammar_cases().values()],
            "tools": [tool_runs(sim, family, TOOLS[:2]) for family in sorted(tool_formats())],
            "llguidance": [guidance_runs(sim, sent) for _, sent in guidance_cases().values()],
            "strings": [string_runs(sim, family) for family in ("hermes", "qwen3_coder")]}
    digest = hashlib.sha256()
    seconds: dict[str, float] = {}
    for kind, sweeps in runs.items():
        seconds[kind] = 0.0
        for sweep in sweeps:
            for budget, run in sweep:
                seconds[kind] += sum(run.fill_seconds)
                digest.update(json.dumps([kind, budget, run.tokens]).encode())
    return {"seconds": seconds, "digest": digest.hexdigest()[:16]}


def _sweep_trees(trees: list[str], rounds: int) -> None:
    results: dict[str, list[dict[str, Any]]] = {tree: [] for tree in trees}
    for _ in range(rounds):
        for tree in trees:
            out = f"/tmp/budget_sweep_{os.getpid()}.json"
            subprocess.run([sys.executable, "-m", "bench.budget_close", "--sweep", "--json-out", out,
                            "--server-from", os.path.abspath(tree)], check=True, stderr=subprocess.DEVNULL)
            with open(out) as f:
                results[tree].append(json.load(f))
    print("seconds in fill_bitmask over the unit tests' budget sweeps (SmolLM2 vocabulary), best of"
          f" {rounds}; the digest is of every token written")
    print("| tree | json | tools | llguidance | strings | all | tokens digest |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for tree, got in results.items():
        best = {kind: min(r["seconds"][kind] for r in got) for kind in got[0]["seconds"]}
        digests = sorted({r["digest"] for r in got})
        print(f"| {tree} | {best['json']:.2f} | {best['tools']:.2f} | {best['llguidance']:.2f} "
              f"| {best['strings']:.2f} | {sum(best.values()):.2f} | {', '.join(digests)} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sweep", action="store_true", help="the unit tests' budget sweeps: fill time, tokens digest")
    parser.add_argument("--trees", default=".", help="with --sweep: comma-separated checkouts, side by side")
    parser.add_argument("--rounds", type=int, default=1, help="with --sweep: runs of each tree (best kept)")
    parser.add_argument("--json-out", help=argparse.SUPPRESS)  # a child's answer
    parser.add_argument("--server-from", help=argparse.SUPPRESS)  # a child's checkout for server/, tool_parsers/
    args = parser.parse_args(argv)
    if args.server_from:
        # this bench's sweeps and cases (tests.unit.budget_cases, imported first) drive the other
        # checkout's server/ and tool_parsers/ (imported after, so from there): an older tree need
        # not have the sweep
        import tests.unit.budget_cases  # noqa: F401

        sys.path.insert(0, args.server_from)
    if args.sweep and not args.json_out:
        _sweep_trees(args.trees.split(","), args.rounds)
        return
    from transformers import AutoTokenizer

    from server.default_model import ensure_default_model

    sim = Sim(AutoTokenizer.from_pretrained(str(ensure_default_model())))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(_sweep(sim), f)
        return
    from tests.unit.budget_cases import SCHEMAS

    print(f"mask fill per token (us), SmolLM2 vocabulary, budget {args.budget}, random writer")
    print("| schema | plain grammar | budgeted, first half | budgeted, second half |")
    print("| --- | ---: | ---: | ---: |")
    for name, plain, far, near in _cost_table(sim, list(SCHEMAS.values()), budget=args.budget, seed=args.seed):
        print(f"| {name} | {plain:.0f} | {far:.0f} | {near:.0f} |")


if __name__ == "__main__":
    main()
