"""CPU per request and per token of the real app against a bare ASGI app, in process, ASGI called directly.

Both serve streamed chat requests from the same scripted FakeEngine (one piece per chunk) and the
same plan (``build_plan``: template, tokenising, constraint); the bare app then frames each chunk
as one SSE event (``ContentFrames``) and nothing else: no FastAPI, no middleware, no stream parse,
no checks, no metrics (what ``bench/transport_floor.py`` is on the live engine). No HTTP client and
no socket: the figures are the apps' own CPU, per request at 1 token and at 128 tokens, so a
route's per-request cost and its per-token cost read apart. Machines here are noisy: the table is
the best of ``--rounds`` runs, and ``--trees`` puts several checkouts side by side, each run in
its own process, alternating (this driver, each tree's app). ``--apis`` sends the real app's
requests to ``/v1/completions`` or ``/v1/responses`` too (the same prompt and script; the bare
app's rows stay chat's, the floor).

    python -m bench.route_cost [--workloads plain,tools,short_calls] [--apis chat,completions,responses]
                               [--rounds 3] [--trees /tmp/base,.]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

__all__ = ["BareApp", "drive", "main", "measure"]

LENGTHS = (1, 128)


class BareApp:
    """The least an ASGI app on the same plan does: read the body, plan, one SSE event per chunk."""

    def __init__(self, state: Any) -> None:
        self.state = state

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from bench.transport_floor import read_body
        from server.chat.sse import DONE, ContentFrames, chunk, sse_event
        from server.plan import build_plan
        from server.protocol import ChatCompletionRequest, usage_dict

        plan = build_plan(self.state, ChatCompletionRequest.model_validate_json(await read_body(receive)))
        frames = ContentFrames(id=plan.id, created=plan.created, model="m")
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        tokens = 0
        async for c in self.state.engine.generate(plan.gen):
            tokens += c.num_tokens
            await send({"type": "http.response.body", "body": frames.content(c.index, c.text), "more_body": True})
        usage = sse_event(chunk(id=plan.id, created=plan.created, model="m", choices=[],
                                usage=usage_dict(len(plan.prompt_ids), tokens)))
        await send({"type": "http.response.body", "body": usage + DONE, "more_body": False})


PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "responses": "/v1/responses"}


def _scope(raw: bytes, path: str = PATHS["chat"]) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "headers": [(b"content-type", b"application/json"),
                                         (b"content-length", str(len(raw)).encode())],
            "client": ("127.0.0.1", 1), "server": ("bench", 80)}


async def drive(app: Any, body: dict[str, Any], *, requests: int, concurrency: int, path: str = PATHS["chat"]) -> float:
    """CPU seconds per request for ``requests`` streamed requests to ``path``, ``concurrency`` at a
    time (after one warm round)."""
    raw = json.dumps(body).encode()
    scope = _scope(raw, path)

    async def one() -> None:
        messages = [{"type": "http.request", "body": raw, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await asyncio.sleep(3600)  # the client stays
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message["status"] != 200:
                raise RuntimeError(f"{path} answered {message['status']}: the figures would not be a stream's")

        await app(dict(scope), receive, send)

    async def worker(k: int) -> None:
        for _ in range(k):
            await one()

    await asyncio.gather(*[worker(requests // concurrency) for _ in range(concurrency)])  # warm
    t0 = time.process_time()
    await asyncio.gather(*[worker(requests // concurrency) for _ in range(concurrency)])
    return (time.process_time() - t0) / (requests // concurrency * concurrency)


def _body(api: str, workload: str) -> dict[str, Any]:
    from bench.stream_cost import WEATHER

    usage = {"stream_options": {"include_usage": True}}
    if api == "completions":
        return {"prompt": "hi", "stream": True, "max_tokens": 1 << 20, **usage}
    if api == "responses":  # (a Responses tool is flat: its name beside its type)
        tools = [{"type": "function", **WEATHER["function"]}]
        return {"input": "hi", "stream": True, "max_output_tokens": 1 << 20,
                **({"tools": tools, "tool_choice": "auto"} if workload != "plain" else {})}
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 1 << 20, **usage}
    if workload != "plain":  # tools, short_calls (bench.stream_cost.WORKLOADS)
        body.update(tools=[WEATHER], tool_choice="auto")
    return body


def measure(workload: str, n: int, *, api: str = "chat", requests: int = 256, concurrency: int = 16) -> dict[str, float]:
    """CPU microseconds per request of the real app (its ``api`` route) and of :class:`BareApp` (chat)
    for ``n``-token answers."""
    from bench.stream_cost import _app

    app = _app(workload, n)
    real = asyncio.run(drive(app, _body(api, workload), requests=requests, concurrency=concurrency, path=PATHS[api]))
    bare = asyncio.run(drive(BareApp(app.state.gs), _body("chat", workload), requests=requests, concurrency=concurrency))
    return {"gramserve": real * 1e6, "bare": bare * 1e6}


def _one_tree(workloads: list[str], apis: list[str]) -> dict[str, dict[str, float]]:
    return {f"{w} {api} {n}": measure(w, n, api=api) for w in workloads for api in apis for n in LENGTHS}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="plain,tools")
    ap.add_argument("--apis", default="chat", help="comma-separated, from " + ",".join(PATHS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trees", default=".", help="comma-separated checkouts, each measured in its own process")
    ap.add_argument("--json-out", help=argparse.SUPPRESS)  # a child's answer
    a = ap.parse_args(argv)
    workloads, apis = a.workloads.split(","), a.apis.split(",")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(_one_tree(workloads, apis), f)
        return
    best: dict[str, dict[str, dict[str, float]]] = {}
    for _ in range(a.rounds):
        for tree in a.trees.split(","):
            out = f"/tmp/route_cost_{os.getpid()}.json"
            # this driver (by path) on the tree's app: ``server`` and ``bench``'s helpers from the tree
            subprocess.run([sys.executable, os.path.abspath(__file__), "--workloads", a.workloads, "--apis", a.apis,
                            "--json-out", out], cwd=tree, check=True, stderr=subprocess.DEVNULL,
                           env={**os.environ, "PYTHONPATH": os.path.abspath(tree)})
            with open(out) as f:
                got = json.load(f)
            mine = best.setdefault(tree, {})
            for cell, apps in got.items():
                mine[cell] = {k: min(v, mine.get(cell, {}).get(k, v)) for k, v in apps.items()}
    print("| tree | workload | app | µs / request, 1 token | µs / request, 128 tokens | µs / added token |")
    print("| --- | --- | --- | --- | --- | --- |")
    for tree, cells in best.items():
        for w in workloads:
            for api in apis:
                for app in ("gramserve", "bare"):
                    if app == "bare" and api != apis[0]:
                        continue  # (the bare app serves chat only: its row once per workload)
                    one, long = cells[f"{w} {api} 1"][app], cells[f"{w} {api} 128"][app]
                    name = app if app == "bare" or api == "chat" else f"{app} {api}"
                    print(f"| {tree} | {w} | {name} | {one:.0f} | {long:.0f} | {(long - one) / 127:.2f} |")


if __name__ == "__main__":
    main()
