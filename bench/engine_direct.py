"""The limit: the same requests fed to vLLM's AsyncLLM in this process, no HTTP, no parsing.

The engine is built exactly as ``gramserve serve`` builds it (``server.runner.build_state``
with the same flags), and each request body is prepared once by gramserve's own code
(``build_plan``: the same chat template, prompt tokens and structured-output constraint),
before any timing. The timed part is only ``AsyncLLM.generate`` with those token ids and
``SamplingParams``; TTFT and inter-token latency count engine outputs that carry text. For
requests with tools, TTFT is when the output first holds something an OpenAI stream can send
(text, or a call whose name is complete and whose arguments have begun: the first tool-call
delta carries the whole name), read with the family's tool parser; the raw first token of a
call marker is not yet a delta any server could send.
CPU: this process is the "API" (vLLM's output processing and detokenisation), its
children the engine core and workers, as for the servers.

    python -m bench.engine_direct --workloads plain,tools --concurrency 1,8 --max-tokens 64 --json out.json
        [-- gramserve serve flags, e.g. --max-model-len 4096]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from bench._proc import cpu_sample, parse_cpus, pin_tree
from bench.serve import Cell, RequestResult, default_requests, markdown_table, run_level, summarize
from bench.workloads import build_workload

__all__ = ["DirectEngine", "main"]


class DirectEngine:
    """gramserve's engine and request preparation, minus the HTTP server and the stream parsing."""

    def __init__(self, serve_args: list[str]) -> None:
        from server.config import settings_from_args
        from server.runner import build_state

        self.state = build_state(settings_from_args(serve_args))
        self.llm = getattr(self.state.engine, "_llm", None)
        if self.llm is None:
            raise SystemExit("server.engine.vllm_engine.VllmEngine no longer keeps its AsyncLLM in ._llm; "
                             "update bench/engine_direct.py")
        self._n = 0

    def prepare(self, body: dict[str, Any]) -> tuple[list[int], Any, bool]:
        """(prompt token ids, vLLM SamplingParams, whether tool calls may come) for one chat body,
        as gramserve would send them."""
        from server.plan import build_plan
        from server.protocol import ChatCompletionRequest

        req = ChatCompletionRequest.model_validate({**body, "model": self.state.engine.model_name})
        gen = build_plan(self.state, req).gen
        params = self.state.engine._sampling_params(gen)  # exactly what the adapter sends
        calls = bool(body.get("tools")) and body.get("tool_choice") != "none" and self.state.tool_parser is not None
        return list(gen.prompt_token_ids), params, calls

    def _sendable(self, text: str) -> bool:
        """Whether a stream could send its first delta for this output so far."""
        parsed = self.state.tool_parser.parse(text, final=False)
        return bool(parsed.content.strip()) or any(
            c.name is not None and (c.arguments or c.complete) for c in parsed.tool_calls)

    def generate(self, ids: list[int], params: Any, request_id: str) -> Any:
        """``AsyncLLM.generate`` of prepared token ids: its outputs, as vLLM yields them."""
        from vllm.inputs.engine import tokens_input

        return self.llm.generate(tokens_input(ids), params, request_id)

    async def one(self, prepared: tuple[list[int], Any, bool]) -> RequestResult:
        ids, params, calls = prepared
        text = ""
        self._n += 1
        t0 = time.perf_counter()
        res = RequestResult(ok=True)
        last = None
        try:
            async for out in self.generate(ids, params, f"direct-{self._n}"):
                now = time.perf_counter()
                for c in out.outputs:
                    res.tokens += len(c.token_ids)
                    if c.text:
                        if last is None:
                            text += c.text
                            if calls and not self._sendable(text):
                                continue
                            res.ttft = now - t0
                        else:
                            res.itls.append(now - last)
                        last = now
        except Exception as exc:  # noqa: BLE001 - reported per request like an HTTP error
            res.ok, res.error = False, f"{type(exc).__name__}: {exc}"
        res.e2e = time.perf_counter() - t0
        return res

    async def cell(self, *, workload: str, concurrency: int, max_tokens: int, requests: int,
                   ignore_eos: bool = True) -> Cell:
        prepared = [self.prepare(b) for b in build_workload(workload, max_tokens=max_tokens, ignore_eos=ignore_eos)]
        warm = [self.prepare(b) for b in build_workload(workload, max_tokens=min(16, max_tokens),
                                                        ignore_eos=ignore_eos)]
        await asyncio.gather(*(self.one(p) for p in warm))
        before = cpu_sample(os.getpid())
        results, wall = await run_level(self.one, prepared, concurrency=concurrency, requests=requests)
        after = cpu_sample(os.getpid())
        return summarize(results, wall_s=wall, target="engine", workload=workload, concurrency=concurrency,
                         max_tokens=max_tokens, cpu=after.minus(before), cpu_api_sys=after.system_since(before))


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.engine_direct", description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="plain,json_schema,tools,agent")
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--max-tokens", default="128", help="comma-separated output lengths")
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false")
    ap.add_argument("--json", default=None)
    ap.add_argument("--pin-cpus", default=None, metavar="FRONT:ENGINE",
                    help="this process on FRONT's CPUs, the engine's processes on ENGINE's (e.g. 1:0), as bench.compare "
                         "pins the servers")
    ap.add_argument("serve_args", nargs="*", help="gramserve serve flags (after --)")
    return ap


async def _amain(a: argparse.Namespace) -> list[Cell]:
    split = parse_cpus(a.pin_cpus) if a.pin_cpus else None
    if split is not None:
        os.sched_setaffinity(0, split.front)
    eng = DirectEngine(a.serve_args)
    if split is not None:
        pin_tree(os.getpid(), split)
    cells = []
    try:
        for n in (int(x) for x in a.max_tokens.split(",")):
            for workload in a.workloads.split(","):
                for conc in (int(x) for x in a.concurrency.split(",")):
                    cell = await eng.cell(workload=workload, concurrency=conc, max_tokens=n,
                                          requests=a.requests or default_requests(conc), ignore_eos=a.ignore_eos)
                    print(markdown_table([cell]).splitlines()[-1], flush=True)
                    cells.append(cell)
    finally:
        eng.llm.shutdown()
    return cells


def main(argv: list[str] | None = None) -> int:
    from server.config import settings_from_args
    from server.runner import run_on_loop

    a = _parser().parse_args(argv)
    cells = run_on_loop(_amain(a), settings_from_args(a.serve_args))  # on gramserve's loop (--event-loop)
    if a.json:
        with open(a.json, "w") as f:
            json.dump([c.as_dict() for c in cells], f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
