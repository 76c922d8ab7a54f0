"""Streaming load generator for any OpenAI-compatible server: latency, throughput, CPU per token.

For each workload (see :mod:`bench.workloads`) and concurrency level, ``--requests`` streamed
chat completions run with at most ``concurrency`` in flight. Per request: time to first
token (TTFT, the first delta with content, reasoning or tool-call text), inter-token
latency (ITL, between consecutive such SSE deltas), end-to-end latency and completion
tokens (``usage`` via ``stream_options.include_usage``). Per cell: requests/s, tokens/s,
p50/p95, and, when the server runs on this machine, the CPU seconds per 1k completion
tokens of the server process itself (the API front end) and of its children (vLLM's
engine core and workers), read from ``/proc``.

    python -m bench.serve --base-url http://127.0.0.1:8000/v1 [--concurrency 1,8,32,64]
        [--workloads plain,json_schema,tools,agent] [--max-tokens 128] [--json out.json]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Awaitable, Callable, Sequence
from urllib.parse import urlsplit

import httpx

from bench._proc import CpuSample, cpu_sample, listening_pid
from bench.workloads import WORKLOADS, build_workload

__all__ = ["RequestResult", "Cell", "percentile", "summarize", "capacity_rows", "capacity_table", "parse_sse_line", "stream_one", "run_cell",
           "run_level", "markdown_table", "default_requests", "main"]


@dataclass
class RequestResult:
    ok: bool
    ttft: float | None = None  # seconds
    itls: list[float] = field(default_factory=list)  # seconds between content deltas
    e2e: float = 0.0
    tokens: int = 0
    error: str | None = None


@dataclass
class Cell:
    target: str
    workload: str
    concurrency: int
    max_tokens: int
    requests: int
    errors: int
    wall_s: float
    tokens: int
    req_per_s: float
    tok_per_s: float
    ttft_p50: float | None
    ttft_p95: float | None
    itl_p50: float | None
    itl_p95: float | None
    e2e_p50: float | None
    e2e_p95: float | None
    cpu_api_s: float | None = None  # the server process itself
    cpu_engine_s: float | None = None  # its descendants
    cpu_api_sys_s: float | None = None  # the kernel part of cpu_api_s (socket writes, polls)
    first_error: str | None = None
    ttft_p99: float | None = None
    itl_p99: float | None = None

    @property
    def cpu_api_per_1k(self) -> float | None:
        return None if self.cpu_api_s is None or not self.tokens else self.cpu_api_s * 1000 / self.tokens

    @property
    def cpu_engine_per_1k(self) -> float | None:
        return None if self.cpu_engine_s is None or not self.tokens else self.cpu_engine_s * 1000 / self.tokens

    @property
    def api_sys_share(self) -> float | None:
        """How much of the API process's CPU was kernel time (0-1)."""
        return None if self.cpu_api_sys_s is None or not self.cpu_api_s else self.cpu_api_sys_s / self.cpu_api_s

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cpu_api_per_1k": self.cpu_api_per_1k, "cpu_engine_per_1k": self.cpu_engine_per_1k}


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation between ranks (numpy's default);
    None for no values."""
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(results: Sequence[RequestResult], *, wall_s: float, target: str, workload: str, concurrency: int,
              max_tokens: int, cpu: tuple[float, float] | None = None, cpu_api_sys: float | None = None) -> Cell:
    """One cell's figures from its requests' results and the wall time they took together."""
    good = [r for r in results if r.ok]
    tokens = sum(r.tokens for r in good)
    itls = [x for r in good for x in r.itls]
    ttfts = [r.ttft for r in good if r.ttft is not None]
    e2es = [r.e2e for r in good]
    bad = [r for r in results if not r.ok]
    return Cell(
        target=target, workload=workload, concurrency=concurrency, max_tokens=max_tokens,
        requests=len(results), errors=len(bad), wall_s=wall_s, tokens=tokens,
        req_per_s=len(good) / wall_s if wall_s > 0 else 0.0, tok_per_s=tokens / wall_s if wall_s > 0 else 0.0,
        ttft_p50=percentile(ttfts, 50), ttft_p95=percentile(ttfts, 95),
        itl_p50=percentile(itls, 50), itl_p95=percentile(itls, 95),
        e2e_p50=percentile(e2es, 50), e2e_p95=percentile(e2es, 95),
        cpu_api_s=cpu[0] if cpu else None, cpu_engine_s=cpu[1] if cpu else None, cpu_api_sys_s=cpu_api_sys,
        first_error=bad[0].error if bad else None,
        ttft_p99=percentile(ttfts, 99), itl_p99=percentile(itls, 99),
    )


def parse_sse_line(line: str) -> tuple[bool, int | None, str | None]:
    """(carries generated text, completion tokens from usage or None, error message or None)
    for one SSE line; other lines give (False, None, None)."""
    if not line.startswith("data:"):
        return False, None, None
    data = line[5:].strip()
    if not data or data == "[DONE]":
        return False, None, None
    ev = json.loads(data)
    if "error" in ev:
        err = ev["error"]
        return False, None, (err.get("message") if isinstance(err, dict) else str(err)) or "error event"
    usage = ev.get("usage")
    tokens = int(usage["completion_tokens"]) if usage and usage.get("completion_tokens") is not None else None
    text = False
    for choice in ev.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"):
            text = True
        for call in delta.get("tool_calls") or ():
            fn = call.get("function") or {}
            if fn.get("arguments") or fn.get("name"):
                text = True
    return text, tokens, None


async def stream_one(client: httpx.AsyncClient, body: dict[str, Any]) -> RequestResult:
    """One streamed chat completion, timed."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    res = RequestResult(ok=False)
    last: float | None = None
    try:
        async with client.stream("POST", "chat/completions", json=body) as r:
            if r.status_code != 200:
                res.error = f"HTTP {r.status_code}: {(await r.aread()).decode(errors='replace')[:300]}"
                res.e2e = time.perf_counter() - t0
                return res
            async for line in r.aiter_lines():
                text, tokens, error = parse_sse_line(line)
                now = time.perf_counter()
                if error:
                    res.error = error
                if tokens is not None:
                    res.tokens = tokens
                if text:
                    if last is None:
                        res.ttft = now - t0
                    else:
                        res.itls.append(now - last)
                    last = now
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    res.e2e = time.perf_counter() - t0
    res.ok = res.error is None
    return res


async def run_level(send: Callable[[dict[str, Any]], Awaitable[RequestResult]], bodies: Sequence[dict[str, Any]],
                    *, concurrency: int, requests: int) -> tuple[list[RequestResult], float]:
    """``requests`` calls of ``send`` (body ``i % len(bodies)``), at most ``concurrency`` at once;
    (results in request order, wall seconds)."""
    results: list[RequestResult | None] = [None] * requests
    next_i = 0

    async def worker() -> None:
        nonlocal next_i
        while next_i < requests:
            i = next_i
            next_i += 1
            results[i] = await send(bodies[i % len(bodies)])

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, requests))))
    return [r for r in results if r is not None], time.perf_counter() - t0


def default_requests(concurrency: int) -> int:
    """Requests per cell: enough for each slot to run twice (at least 4)."""
    return max(4, 2 * concurrency)


def _sample(pid: int | None) -> CpuSample | None:
    if pid is None:
        return None
    try:
        return cpu_sample(pid)
    except ProcessLookupError:
        return None


async def run_cell(client: httpx.AsyncClient, *, target: str, workload: str, concurrency: int, max_tokens: int,
                   requests: int, server_pid: int | None = None, model: str | None = None,
                   ignore_eos: bool = True, warmup: bool = True) -> Cell:
    """One (workload, concurrency) cell against an HTTP server, with its CPU cost when ``server_pid``."""
    bodies = build_workload(workload, max_tokens=max_tokens, ignore_eos=ignore_eos)
    if model:
        bodies = [{**b, "model": model} for b in bodies]
    if warmup:  # grammar compiles, validators and the first prefills stay out of the figures
        # Answers under a grammar are warmed whole: a server that checks a finished answer against its
        # schema (gramserve) builds that validator once per schema, and a 16-token answer never finishes.
        warm = build_workload(workload, max_tokens=max_tokens if workload != "plain" else min(16, max_tokens),
                              ignore_eos=ignore_eos)
        await asyncio.gather(*(stream_one(client, {**b, "model": model} if model else b) for b in warm))
    before = _sample(server_pid)
    results, wall = await run_level(lambda b: stream_one(client, b), bodies, concurrency=concurrency,
                                    requests=requests)
    after = _sample(server_pid)
    cpu = after.minus(before) if before and after else None
    return summarize(results, wall_s=wall, target=target, workload=workload, concurrency=concurrency,
                     max_tokens=max_tokens, cpu=cpu, cpu_api_sys=after.system_since(before) if cpu else None)


def _f(x: float | None, scale: float = 1.0, digits: int = 0) -> str:
    return "-" if x is None else f"{x * scale:.{digits}f}"


def markdown_table(cells: Sequence[Cell]) -> str:
    """The cells as a markdown table (latencies in ms, E2E in s, CPU in s per 1k completion tokens)."""
    head = ("| target | workload | conc | max_tokens | req | err | req/s | tok/s | TTFT p50/p95 ms | ITL p50/p95 ms "
            "| E2E p50/p95 s | API CPU s/1k tok | API sys % | engine CPU s/1k tok |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for c in cells:
        rows.append(
            f"| {c.target} | {c.workload} | {c.concurrency} | {c.max_tokens} | {c.requests} | {c.errors} "
            f"| {c.req_per_s:.2f} | {c.tok_per_s:.1f} | {_f(c.ttft_p50, 1000)}/{_f(c.ttft_p95, 1000)} "
            f"| {_f(c.itl_p50, 1000, 1)}/{_f(c.itl_p95, 1000, 1)} | {_f(c.e2e_p50, 1, 2)}/{_f(c.e2e_p95, 1, 2)} "
            f"| {_f(c.cpu_api_per_1k, 1, 3)} | {_f(c.api_sys_share, 100)} | {_f(c.cpu_engine_per_1k, 1, 2)} |")
    return "\n".join(rows)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.serve", description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="OpenAI base URL (ending in /v1)")
    ap.add_argument("--api-key", default="unused")
    ap.add_argument("--model", default=None, help="model name (default: the first of GET /models)")
    ap.add_argument("--target", default="server", help="label of this server in the table")
    ap.add_argument("--workloads", default="plain,json_schema,tools,agent",
                    help=f"comma-separated, from {','.join(WORKLOADS)}")
    ap.add_argument("--concurrency", default="1,8,32,64", help="comma-separated levels")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--requests", type=int, default=None, help="requests per cell (default: max(4, 2 x conc))")
    ap.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                    help="let plain requests stop at EOS (default: run to max_tokens)")
    ap.add_argument("--server-pid", type=int, default=None,
                    help="the server's pid for CPU figures (default: the process listening on the port)")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--json", default=None, help="write the cells to this JSON file")
    return ap


async def _amain(a: argparse.Namespace) -> list[Cell]:
    base = a.base_url.rstrip("/") + "/"
    pid = a.server_pid
    if pid is None:
        parts = urlsplit(base)
        if parts.hostname in ("127.0.0.1", "localhost", "::1"):
            pid = listening_pid(parts.port or 80)
    cells = []
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=base, timeout=a.timeout, limits=limits,
                                 headers={"Authorization": f"Bearer {a.api_key}"}) as client:
        model = a.model or (await client.get("models")).json()["data"][0]["id"]
        for workload in a.workloads.split(","):
            for conc in _ints(a.concurrency):
                cell = await run_cell(client, target=a.target, workload=workload, concurrency=conc,
                                      max_tokens=a.max_tokens, requests=a.requests or default_requests(conc),
                                      server_pid=pid, model=model, ignore_eos=a.ignore_eos)
                print(markdown_table([cell]).splitlines()[-1], file=sys.stderr, flush=True)
                cells.append(cell)
    return cells


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    cells = asyncio.run(_amain(a))
    print(markdown_table(cells))
    if a.json:
        with open(a.json, "w") as f:
            json.dump([c.as_dict() for c in cells], f, indent=1)
    return 1 if any(c.errors for c in cells) else 0


if __name__ == "__main__":
    raise SystemExit(main())


def capacity_rows(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """Per target, workload and length: the highest concurrency whose ITL p99 stays under twice its
    value at concurrency 1 (the latency a user planning capacity holds), with its figures. Needs
    a c1 cell; the median cell per concurrency when repeated."""
    groups: dict[tuple[str, str, int], dict[int, list[Cell]]] = {}
    for c in cells:
        groups.setdefault((c.target, c.workload, c.max_tokens), {}).setdefault(c.concurrency, []).append(c)
    rows = []
    for (target, workload, max_tokens), by_conc in groups.items():
        median = {k: sorted(v, key=lambda c: c.tok_per_s)[len(v) // 2] for k, v in by_conc.items()}
        base = median.get(1)
        if base is None or base.itl_p99 is None:
            continue
        held = [k for k, c in sorted(median.items()) if c.itl_p99 is not None and c.itl_p99 < 2 * base.itl_p99]
        best = median[max(held)] if held else base
        rows.append({"target": target, "workload": workload, "max_tokens": max_tokens,
                     "itl_p99_c1": base.itl_p99, "concurrency": best.concurrency, "tok_per_s": best.tok_per_s,
                     "ttft_p50": best.ttft_p50, "ttft_p99": best.ttft_p99, "itl_p50": best.itl_p50,
                     "itl_p99": best.itl_p99, "cpu_api_per_1k": best.cpu_api_per_1k})
    return rows


def capacity_table(cells: Sequence[Cell]) -> str:
    """:func:`capacity_rows` as markdown."""
    head = ("| target | workload | max_tokens | ITL p99 at c1 ms | highest conc with ITL p99 < 2x | tok/s "
            "| TTFT p50/p99 ms | ITL p50/p99 ms | API CPU s/1k tok |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in capacity_rows(cells):
        lines.append(f"| {r['target']} | {r['workload']} | {r['max_tokens']} | {_f(r['itl_p99_c1'], 1000, 1)} "
                     f"| {r['concurrency']} | {r['tok_per_s']:.1f} | {_f(r['ttft_p50'], 1000)}/{_f(r['ttft_p99'], 1000)} "
                     f"| {_f(r['itl_p50'], 1000, 1)}/{_f(r['itl_p99'], 1000, 1)} | {_f(r['cpu_api_per_1k'], 1, 3)} |")
    return "\n".join(lines)
