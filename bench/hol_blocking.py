"""Head-of-line blocking: does compiling an unseen schema delay an unrelated plain stream?

For each round: the time to first token (TTFT) of a plain streamed request alone, then the
same request started right after (a) a schema check of an unseen heavy schema (the API
process compiles it), (b) a chat request with such a schema as response_format whose
API-process compile was cached just before (so only the engine compiles it; it is not in
the prompt) and (c) one as a tool's parameters (both compile it, and its prompt holds it). Rounds interleave the three so a noisy machine's drift stays out of
the ratios; a table of medians and ratios to "alone" is printed.

    python -m bench.hol_blocking --base-url http://127.0.0.1:8000 [--rounds 3] [--api-key KEY]
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from typing import Any

import httpx

__all__ = ["heavy_schema", "ttft", "main"]

PLAIN = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "stream": True, "temperature": 0}


def heavy_schema(tag: str, n: int = 6) -> dict[str, Any]:
    """An object schema that takes xgrammar seconds to compile (string lengths bounds, each
    different); ``tag`` in the names makes it unseen by every cache."""
    props = {f"{tag}_{i}": {"type": "string", "minLength": 50 + i, "maxLength": 400 + 7 * i} for i in range(n)}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def ttft(c: httpx.Client, body: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    with c.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: {") and '"content":"' in line and '"content":""' not in line:
                return time.perf_counter() - t0
    return time.perf_counter() - t0


def _background(c: httpx.Client, mode: str) -> threading.Thread:
    tag = "s" + uuid.uuid4().hex[:8]
    if mode == "schema check":
        target = lambda: c.post("/v1/schemas/check", json=heavy_schema(tag))  # noqa: E731
    elif mode == "unseen tool schema":  # the schema is also in the prompt: its prefill counts too
        tool = {"type": "function", "function": {"name": "submit", "parameters": heavy_schema(tag)}}
        target = lambda: c.post("/v1/chat/completions", json={  # noqa: E731
            "messages": [{"role": "user", "content": "Fill the form."}], "max_tokens": 4,
            "tools": [tool], "tool_choice": "required"})
    else:  # engine compile: the API process's cache is warmed first, and the schema is not in the prompt
        schema = heavy_schema(tag)
        c.post("/v1/schemas/check", json=schema).raise_for_status()
        target = lambda: c.post("/v1/chat/completions", json={  # noqa: E731
            "messages": [{"role": "user", "content": "Fill the form."}], "max_tokens": 4,
            "response_format": {"type": "json_schema", "json_schema": {"name": "f", "schema": schema}}})
    t = threading.Thread(target=target)
    t.start()
    return t


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--api-key", default="unused")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    modes = ("alone", "schema check", "engine compile", "unseen tool schema")
    times: dict[str, list[float]] = {m: [] for m in modes}
    with httpx.Client(base_url=a.base_url.removesuffix("/v1"), timeout=600,
                      headers={"Authorization": f"Bearer {a.api_key}"}) as c:
        ttft(c, PLAIN)  # warm
        for _ in range(a.rounds):
            for mode in modes:
                bg = None if mode == "alone" else _background(c, mode)
                if bg is not None:
                    time.sleep(0.3)  # the compile has started
                times[mode].append(ttft(c, PLAIN))
                if bg is not None:
                    bg.join()
    base = statistics.median(times["alone"])
    print("| plain stream TTFT while ... | median s | ratio to alone | all (s) |\n|---|---|---|---|")
    for mode in modes:
        med = statistics.median(times[mode])
        print(f"| {mode} | {med:.2f} | {med / base:.1f}x | {', '.join(f'{t:.2f}' for t in times[mode])} |")


if __name__ == "__main__":
    main()
