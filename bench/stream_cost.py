"""CPU per streamed token of the whole front end, in process, by output length.

One streamed ``/v1/chat/completions`` request through the real app (middleware, route, chat
service, parsers, SSE framing) over an in-process ASGI transport, with the scripted
FakeEngine yielding one token per chunk, so the engine costs nothing and what is measured is
gramserve's own work per token (plus the in-process HTTP client reading the stream). Flat rows
mean amortised O(1) work per token.

    python -m bench.stream_cost [--lengths 128,1024,4096] [--repeats 3]
"""
from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

__all__ = ["WORKLOADS", "main", "measure"]

WEATHER = {"type": "function", "function": {"name": "write_note", "description": "Save a note.", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}


WORKLOADS = ("plain", "tools", "short_calls")


def _pieces(workload: str, n: int) -> list[str]:
    """``n`` engine chunks of ``workload``: prose; one call with a long string argument, its head in
    three chunks; or a turn of short calls written as a small vocabulary writes them, the head in many
    chunks (the stand-in's bench answers are such calls: its head takes about 25)."""
    if workload == "plain":
        return ["word "] * n
    if workload == "short_calls":
        from bench.parse_cost import tokens_of

        out: list[str] = []
        while len(out) < n:
            k = len(out)
            out += tokens_of(f'<tool_call>\n{{"name": "write_note", "arguments": {{"text": "n{k}"}}}}\n</tool_call>\n')
        return out[:n]
    head = ["<tool_call>", "\n", '{"name": "write_note", "arguments": {"text": "']
    return head + ["lorem "] * (n - len(head) - 1) + ['"}}\n</tool_call>']


def _app(workload: str, n: int) -> Any:
    from server import metrics
    from server.api.app import create_app
    from server.chat.render import ChatRenderer
    from server.config import Settings
    from server.default_model import ensure_default_model
    from server.engine.fake import FakeEngine
    from server.state import ServerState
    from tool_parsers import get_tool_parser

    model = ensure_default_model(progress=False)
    engine = FakeEngine(script=lambda req: _pieces(workload, n), max_model_len=1 << 22)
    # no grammar cache: the fake engine ignores constraints, and compiles are not per token
    state = ServerState(settings=Settings(tool_constraints=False), engine=engine, grammar_cache=None,
                        renderer=ChatRenderer.from_model(model_dir_or_tokenizer=str(model), chat_template="hermes"),
                        tool_parser=get_tool_parser("hermes"))
    metrics.init_labels(tool_parser="hermes")
    state.ready = True
    return create_app(state)


async def measure(workload: str, n: int, repeats: int) -> float:
    """Best-of-``repeats`` CPU microseconds per token for one streamed answer of ``n`` tokens."""
    import httpx

    app = _app(workload, n)
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 1 << 21}
    if workload != "plain":
        body.update(tools=[WEATHER], tool_choice="auto")
    best = float("inf")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as client:
        for _ in range(repeats + 1):  # the first round warms caches
            t0 = time.process_time()
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                async for _ in r.aiter_raw():
                    pass
            best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", default="128,1024,4096")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    print("| workload | " + " | ".join(f"{n} tokens" for n in lengths) + " |")
    print("| --- |" + " --- |" * len(lengths))
    for workload in WORKLOADS:
        cells = [asyncio.run(measure(workload, n, args.repeats)) for n in lengths]
        print(f"| {workload} (CPU µs/token) | " + " | ".join(f"{c:.1f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
