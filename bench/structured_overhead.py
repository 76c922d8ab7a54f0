"""What constraints cost: throughput and latency with and without a grammar, side by side.

Runs the same prompts against one OpenAI-compatible server in one interleaved run
(unconstrained, json_schema, tool call required), plus the grammar compile time cold vs
cached through ``/v1/schemas/check``, and prints a table of ratios to the unconstrained
baseline. Interleaving the modes round by round keeps a noisy machine's drift out of
the ratios.

    python -m bench.structured_overhead --base-url http://127.0.0.1:8000/v1 [--rounds 5] [--concurrency 32]

TPOT (time per output token after the first, per request) is the grammar's cost per token;
``--concurrency N`` sends N copies of each request at once, so the grammar work of a full
batch is in the figure.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 130},
                                           "city": {"type": "string", "maxLength": 40}},
          "required": ["name", "age", "city"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string", "maxLength": 40},
                                               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                                               "required": ["city"], "additionalProperties": False}}}]
PROMPT = "Describe a person who lives in Paris, and mention the weather there."

MODES: dict[str, dict[str, Any]] = {
    "free text": {},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA,
                                                                               "strict": True}}},
    "tool call (required)": {"tools": TOOLS, "tool_choice": "required"},
}


def one(client: httpx.Client, body: dict[str, Any]) -> tuple[float, float, int]:
    """(time to first content byte, total seconds, completion tokens) for one streamed request."""
    start = time.perf_counter()
    first = None
    tokens = 0
    with client.stream("POST", "/chat/completions", json={**body, "stream": True,
                                                          "stream_options": {"include_usage": True}}) as r:
        if r.status_code != 200:  # e.g. a budget below the shortest valid answer: the server says which
            raise SystemExit(f"{r.status_code} for {sorted(body)}: {r.read().decode(errors='replace')}")
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
            elif first is None and ev["choices"] and (ev["choices"][0]["delta"].get("content")
                                                      or ev["choices"][0]["delta"].get("tool_calls")):
                first = time.perf_counter() - start
    return first or 0.0, time.perf_counter() - start, tokens


def compile_times(client: httpx.Client) -> tuple[float, float]:
    schema = json.loads(json.dumps(SCHEMA))  # a new cache key (annotations are normalised away)
    schema["properties"]["name"]["maxLength"] = 41 + uuid.uuid4().int % 100_000
    cold = client.post("/schemas/check", json=schema).json()["items"][0]["compile_seconds"]
    warm = client.post("/schemas/check", json=schema).json()["items"][0]
    return cold, (warm["compile_seconds"] if warm["cached"] else float("nan"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--api-key", default="unused")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=1, help="copies of each request in flight at once")
    ns = ap.parse_args(argv)
    headers = {"Authorization": f"Bearer {ns.api_key}"}
    results: dict[str, list[tuple[float, float, int]]] = {m: [] for m in MODES}
    limits = httpx.Limits(max_connections=ns.concurrency + 2)
    with httpx.Client(base_url=ns.base_url, headers=headers, timeout=300, limits=limits) as client, \
            ThreadPoolExecutor(ns.concurrency) as pool:
        model = client.get("/models").json()["data"][0]["id"]
        for extra in MODES.values():  # warm-up: compile every grammar once (a budget each grammar can close in)
            one(client, {"model": model, "messages": [{"role": "user", "content": PROMPT}],
                         "max_tokens": max(ns.max_tokens, 32), **extra})
        for _ in range(ns.rounds):
            for mode, extra in MODES.items():
                body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "temperature": 0,
                        "max_tokens": ns.max_tokens, "ignore_eos": mode == "free text", **extra}
                results[mode] += pool.map(lambda b: one(client, b), [body] * ns.concurrency)
        cold, warm = compile_times(client)
    base_tps = None
    base_tpot = None
    print(f"concurrency {ns.concurrency}, {ns.rounds} rounds, max_tokens {ns.max_tokens}")
    print(f"{'mode':<22} {'tok/s':>8} {'ratio':>7} {'TPOT p50 ms':>12} {'TPOT ratio':>11} {'TTFT p50 s':>11} "
          f"{'tokens/req':>11}")
    for mode, rows in results.items():
        tps = sum(r[2] for r in rows) / max(1e-9, sum(r[1] for r in rows))
        tpot = statistics.median((r[1] - r[0]) / (r[2] - 1) for r in rows if r[2] > 1 and r[0] > 0)
        base_tps, base_tpot = base_tps or tps, base_tpot or tpot
        print(f"{mode:<22} {tps:>8.1f} {tps / base_tps:>7.2f} {tpot * 1000:>12.1f} {tpot / base_tpot:>11.2f} "
              f"{statistics.median(r[0] for r in rows):>11.3f} {statistics.mean(r[2] for r in rows):>11.1f}")
    print(f"\ngrammar compile (json_schema above): cold {cold * 1000:.1f} ms, cached lookup {warm * 1000:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
