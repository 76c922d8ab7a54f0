"""Which weights dtype the CPU default should be: agreement with float32 transformers and speed.

For each dtype, start ``gramserve serve --dtype D`` on the embedded model, then:

- **quality**: the engine's greedy answers to ``evals.reference.ENGINE_PROMPTS`` with top-5
  logprobs, compared step by step with transformers in float32 on the same converted folder
  (top-1 agreement, mean and max |logprob difference|, ordered pairs kept);
- **speed**: streamed tokens/s of the ``plain`` workload (``ignore_eos``) at each concurrency.

Prints the CPU's matrix features (AMX, AVX512-BF16) and one table. Run on an otherwise idle
machine; the two servers run one after the other.

    .venv/bin/python -m bench.dtype --dtypes bfloat16,float32 --concurrency 1,8 --max-tokens 256
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench._proc import free_port
from bench.compare import _start, _stop
from bench.serve import run_cell
from evals.reference import ENGINE_PROMPTS, Agreement, Reference, compare_logprobs

__all__ = ["cpu_matrix_features", "main"]

REPO = Path(__file__).resolve().parents[1]
_FEATURES = ("amx_bf16", "amx_tile", "amx_int8", "avx512_bf16", "avx512f", "avx2")


def cpu_matrix_features(cpuinfo: str | None = None) -> dict[str, bool]:
    """Which of the flags that decide bf16 speed the CPU reports (``/proc/cpuinfo``)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
            break
    return {name: name in flags for name in _FEATURES}


def _agreement(base: str, ref: Reference, *, steps: int, tol: float) -> Agreement:
    agr = Agreement()
    with httpx.Client(base_url=base, timeout=600) as http:
        model = http.get("/v1/models").json()["data"][0]["id"]
        for name, messages in ENGINE_PROMPTS.items():
            body = {"model": model, "messages": messages, "temperature": 0, "max_tokens": steps,
                    "logprobs": True, "top_logprobs": 5}
            r = http.post("/v1/chat/completions", json=body)
            r.raise_for_status()
            content = r.json()["choices"][0]["logprobs"]["content"]
            compare_logprobs(ref, messages, content, tol=tol, agreement=agr, label=name)
    return agr


async def _speed(base: str, *, concurrency: list[int], max_tokens: int) -> dict[int, float]:
    out = {}
    async with httpx.AsyncClient(base_url=base + "/v1/", timeout=1800,
                                 limits=httpx.Limits(max_connections=None)) as client:
        model = (await client.get("models")).json()["data"][0]["id"]
        for conc in concurrency:
            cell = await run_cell(client, target="gramserve", workload="plain", concurrency=conc,
                                  max_tokens=max_tokens, requests=max(2, 2 * conc), model=model)
            out[conc] = cell.tok_per_s
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.dtype", description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=24, help="greedy steps compared per prompt")
    ap.add_argument("--repeats", type=int, default=2, help="speed cells per dtype (median shown)")
    ap.add_argument("--tol", type=float, default=0.5, help="|logprob diff| counted as a failure above this")
    a = ap.parse_args(argv)

    from server.default_model import ensure_default_model

    model_dir = ensure_default_model(progress=False)
    ref = Reference(model_dir)
    feats = cpu_matrix_features()
    print("CPU:", ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in feats.items()), flush=True)
    conc = [int(x) for x in a.concurrency.split(",") if x]
    dtypes = a.dtypes.split(",")
    logs = Path(tempfile.mkdtemp(prefix="gramserve-dtype-"))
    servers: dict[str, tuple[Any, str]] = {}
    try:
        for dtype in dtypes:  # all up at once, so the speed cells can interleave
            port = free_port()  # (below the ephemeral range: bench._proc)
            cmd = [sys.executable, "-m", "server", "serve", "--port", str(port), "--dtype", dtype]
            servers[dtype] = (_start(cmd, dict(os.environ), port, logs / f"{dtype}.log"), f"http://127.0.0.1:{port}")
        agreement = {d: _agreement(base, ref, steps=a.steps, tol=a.tol) for d, (_, base) in servers.items()}
        speed: dict[str, dict[int, list[float]]] = {d: {c: [] for c in conc} for d in dtypes}
        for _ in range(a.repeats):  # cell by cell, one dtype right after the other (a shared machine drifts)
            for c in conc:
                for d in dtypes:
                    speed[d][c].append(asyncio.run(_speed(servers[d][1], concurrency=[c],
                                                          max_tokens=a.max_tokens))[c])
    finally:
        for proc, _ in servers.values():
            _stop(proc)
    rows = [(d, agreement[d], {c: statistics.median(v) for c, v in speed[d].items()}) for d in dtypes]
    head = ("| dtype | steps | top-1 agree | ordered pairs kept | mean abs diff | max abs diff | failures (> tol) | "
            + " | ".join(f"tok/s c{c} (median)" for c in conc) + " |")
    print()
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for dtype, agr, tps in rows:
        print(f"| {dtype} | {agr.steps} | {agr.top1_agree}/{agr.steps} | {agr.order_agree}/{agr.order_checked} "
              f"| {agr.mean_abs:.4f} | {agr.max_abs:.4f} | {len(agr.failures)} | "
              + " | ".join(f"{tps[c]:.1f}" for c in conc) + " |")
    for dtype, agr, _ in rows:
        for line in agr.failures[:10]:
            print(f"  {dtype}: {line}")
    print(f"\nlogs: {logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
