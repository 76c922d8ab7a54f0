"""The grammar's cost inside the engine: engine CPU per token with a grammar against plain text, per vocabulary.

bench/structured_overhead.py reads a grammar's cost from the client (TPOT). This reads it from the engine's
processes: the XGrammar bitmask is ``ceil(vocab / 32)`` words a row, filled in vLLM's ``EngineCore`` process
(``StructuredOutputManager.grammar_bitmask``) and applied to the logits in the worker (``apply_grammar_bitmask``
in ``sample_tokens``), so its cost grows with the vocabulary: 49k on SmolLM2, 150k-200k on real models (issue 39).

For each vocabulary one gramserve server runs on a stand-in of that vocabulary (bench/standin.py for ``standin``,
bench/vocab_standin.py for the others, with tests/e2e/test_real_vocab.py's template, parser and closing biases),
and rounds of four modes run interleaved, ``--concurrency`` copies at a time: plain text (``ignore_eos``, so it
runs to ``--max-tokens``), plain text at half ``--max-tokens`` (about the constrained answers' length, so the fixed
cost of a request, prefill and the batch's ramp-down, weighs alike), a ``json_schema`` answer and a
``tool_choice: required`` call (the grammar may end those early, so every figure is divided by
``usage.completion_tokens``). Around each batch the CPU seconds of the engine core (``VLLM::EngineCore``) and of
the worker (``VLLM::Worker*``) are read from ``/proc``; the API process is left
out. The stand-in's forward pass is tiny, so grammar work shows as it would next to a GPU's forward pass.

    python -m bench.grammar_cost --vocabs standin,qwen3,o200k_harmony --rounds 3 --max-tokens 64 --concurrency 4

Caveat: the engine core polls its queues while the worker computes, so its CPU tracks the step's wall time too.
"""
from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench._proc import _all_stats, descendants
from bench.structured_overhead import MODES, PROMPT

__all__ = ["Batch", "engine_cpu", "main", "summarise", "table"]

PLAIN = "free text"
SHORT = "free text (half length)"  # plain at about the constrained answers' length: the same fixed cost a request
ALL_MODES: dict[str, dict[str, Any]] = {PLAIN: MODES[PLAIN], SHORT: MODES[PLAIN],
                                        **{k: v for k, v in MODES.items() if k != PLAIN}}


@dataclass
class Batch:
    """One mode's total over a run: completion tokens, wall seconds, engine core and worker CPU seconds."""
    tokens: int = 0
    requests: int = 0
    wall_s: float = 0.0
    core_s: float = 0.0
    worker_s: float = 0.0


def engine_cpu(server_pid: int) -> tuple[float, float]:
    """(engine core, worker) CPU seconds so far, summed over the server's descendants by process title."""
    core = worker = 0.0
    for st in descendants(server_pid, _all_stats(Path("/proc"))):
        if st.comm.startswith("VLLM::EngineCor"):
            core += st.cpu_seconds
        elif st.comm.startswith("VLLM::Worker"):
            worker += st.cpu_seconds
    return core, worker


def _server(vocab: str) -> tuple[Path, list[str], dict[str, Any]]:
    """(model folder, extra server flags, chat_template_kwargs) of a vocabulary's stand-in."""
    if vocab == "standin":
        from bench.standin import ensure_standin

        return ensure_standin(), ["--chat-template", "hermes", "--tool-call-parser", "hermes"], {}
    from bench.vocab_standin import ensure_vocab_standin, vocab_closing_texts
    from tests.e2e.test_real_vocab import ROWS

    row = next((r for r in ROWS if r.vocab == vocab), None)
    if row is None:
        raise SystemExit(f"no stand-in row for vocabulary {vocab!r}: one of standin, {', '.join(r.vocab for r in ROWS)}")
    folder = ensure_vocab_standin(row.vocab, row.template(), vocab_closing_texts(
        *row.closing, end=row.end, bias=row.closing_bias, more=row.prefer))
    return folder, ["--tool-call-parser", row.parser], dict(row.kwargs)


def _one(client: httpx.Client, body: dict[str, Any]) -> int:
    r = client.post("/chat/completions", json=body)
    if r.status_code != 200:
        raise RuntimeError(f"{r.status_code}: {r.text[:500]}")
    return int(r.json()["usage"]["completion_tokens"])


def run_vocab(vocab: str, a: argparse.Namespace) -> tuple[int, dict[str, Batch]]:
    """Start the vocabulary's server, run the interleaved rounds; (vocab size, mode -> totals)."""
    from tests.server_process import API_KEY, CLIENT_TIMEOUT_S, ServerProcess

    folder, flags, kwargs = _server(vocab)
    size = int(json.loads((folder / "config.json").read_text())["vocab_size"])
    srv = ServerProcess(["--api-key", API_KEY, "--model", str(folder), "--served-model-name", "standin",
                         "--max-model-len", "2048", "--kv-cache-space", "1", *flags], log_name=f"grammar-cost-{vocab}")
    batches = {mode: Batch() for mode in ALL_MODES}
    try:
        print(f"# {vocab}: {size} tokens, ready in {srv.wait_ready():.1f}s (log {srv.log_path})", flush=True)
        with httpx.Client(base_url=srv.base + "/v1", headers={"Authorization": f"Bearer {API_KEY}"},
                          timeout=CLIENT_TIMEOUT_S, limits=httpx.Limits(max_connections=a.concurrency + 2)) as client, \
                ThreadPoolExecutor(a.concurrency) as pool:
            def body(mode: str, max_tokens: int) -> dict[str, Any]:
                return {"model": "standin", "messages": [{"role": "user", "content": PROMPT}], "temperature": 0,
                        "max_tokens": max_tokens // 2 if mode == SHORT else max_tokens,
                        "ignore_eos": mode in (PLAIN, SHORT), **ALL_MODES[mode],
                        **({"chat_template_kwargs": kwargs} if kwargs else {})}
            for mode in ALL_MODES:  # warm-up: every grammar compiled once, outside the figures
                _one(client, body(mode, a.max_tokens))
            for _ in range(a.rounds):
                for mode in ALL_MODES:
                    b = batches[mode]
                    core0, worker0 = engine_cpu(srv.proc.pid)
                    start = time.perf_counter()
                    b.tokens += sum(pool.map(lambda x: _one(client, x), [body(mode, a.max_tokens)] * a.concurrency))
                    b.wall_s += time.perf_counter() - start
                    core1, worker1 = engine_cpu(srv.proc.pid)
                    b.core_s += core1 - core0
                    b.worker_s += worker1 - worker0
                    b.requests += a.concurrency
    finally:
        srv.stop()
    return size, batches


def fill_apply_us(vocab: str, repeats: int = 20) -> tuple[float, float]:
    """(fill, apply) microseconds for one sequence's row, in process: XGrammar's ``fill_next_token_bitmask`` at each
    position of a compact JSON answer (bench/structured_overhead.py's schema, whitespace off as gramserve compiles
    it), and ``apply_token_bitmask_inplace`` on a float32 logits row of the model's width (vLLM's CPU path)."""
    import torch
    import xgrammar as xgr
    from transformers import AutoTokenizer

    from bench.structured_overhead import SCHEMA

    folder = _server(vocab)[0]
    size = int(json.loads((folder / "config.json").read_text())["vocab_size"])
    tok = AutoTokenizer.from_pretrained(str(folder))
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tok, vocab_size=size)).compile_json_schema(
        json.dumps(SCHEMA), any_whitespace=False, separators=(",", ":"))
    ids = tok.encode('{"name":"Ann Lee","age":30,"city":"Paris"}', add_special_tokens=False)
    bitmask, logits = xgr.allocate_token_bitmask(1, size), torch.zeros(1, size)
    fill = apply = 0.0
    for _ in range(repeats):
        matcher = xgr.GrammarMatcher(compiled)
        for t in ids:
            start = time.perf_counter()
            matcher.fill_next_token_bitmask(bitmask)
            fill += time.perf_counter() - start
            start = time.perf_counter()
            xgr.apply_token_bitmask_inplace(logits, bitmask)
            apply += time.perf_counter() - start
            assert matcher.accept_token(t), f"{vocab}: token {t} refused"
    n = repeats * len(ids)
    return 1e6 * fill / n, 1e6 * apply / n


def summarise(vocab: str, size: int, batches: dict[str, Batch]) -> list[dict[str, Any]]:
    """Table rows: engine CPU ms per completion token (core + worker), its ratio to plain text, tokens/s."""
    def per_tok(b: Batch) -> float:
        return 1000 * (b.core_s + b.worker_s) / max(1, b.tokens)

    base = per_tok(batches[PLAIN]) if PLAIN in batches else float("nan")
    return [{"vocab": vocab, "size": size, "mode": mode, "ms_per_tok": per_tok(b),
             "core_ms": 1000 * b.core_s / max(1, b.tokens), "worker_ms": 1000 * b.worker_s / max(1, b.tokens),
             "ratio": per_tok(b) / base if base else float("nan"), "tok_s": b.tokens / max(1e-9, b.wall_s),
             "tok_per_req": b.tokens / max(1, b.requests)} for mode, b in batches.items()]


def table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of :func:`summarise`'s rows."""
    lines = ["| vocabulary | vocab size | mode | engine CPU ms/token | (core / worker) | ratio to plain | tokens/s "
             "| tokens/request |", "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['vocab']} | {r['size']:,} | {r['mode']} | {r['ms_per_tok']:.3f} | {r['core_ms']:.3f} / "
              f"{r['worker_ms']:.3f} | {r['ratio']:.2f} | {r['tok_s']:.0f} | {r['tok_per_req']:.1f} |" for r in rows]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocabs", default="standin,qwen3,o200k_harmony",
                    help="comma-separated: standin (SmolLM2 49k) or a bench/vocab_standin.py vocabulary")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4, help="copies of each request in flight at once")
    ap.add_argument("--json", help="write the rows here too")
    ap.add_argument("--micro", action="store_true", help="only the in-process fill/apply microseconds a row")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.micro:
        print("| vocabulary | fill µs/row | apply µs/row |\n| --- | ---: | ---: |")
        for vocab in a.vocabs.split(","):
            fill, apply = fill_apply_us(vocab)
            print(f"| {vocab} | {fill:.1f} | {apply:.1f} |", flush=True)
        return 0
    rows: list[dict[str, Any]] = []
    for vocab in a.vocabs.split(","):
        size, batches = run_vocab(vocab, a)
        rows += summarise(vocab, size, batches)
        print(table(summarise(vocab, size, batches)), flush=True)
    print(f"\n{a.rounds} rounds x {a.concurrency} concurrent, max_tokens {a.max_tokens}\n\n{table(rows)}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
