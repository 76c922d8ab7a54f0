"""Thread CPU of named functions on a live server's main thread: where the API process's CPU goes,
function by function, under real load (py-spy samples wall time of every thread; this sums
``time.thread_time_ns`` around each call, on the event loop's thread only, outermost calls only).

``run`` starts a module as ``__main__`` (``server`` or ``bench.transport_floor``) with the functions
wrapped, and rewrites a JSON snapshot of the running totals every ``--every`` seconds; copy it before
and after a load (``bench.serve``) and ``table`` prints what the load cost, target beside target::

    python -m bench.thread_cpu run --out /tmp/g.json -- server serve --port 8792 --model ...
    cp /tmp/g.json /tmp/g0.json; python -m bench.serve ... --workloads tools; cp /tmp/g.json /tmp/g1.json
    python -m bench.thread_cpu table gramserve=/tmp/g0.json:/tmp/g1.json transport=/tmp/t0.json:/tmp/t1.json

The wrapper costs about a microsecond a call (two clock reads): rows with many calls read high. One
API process only: with ``--api-server-count`` above 1 the API processes are children, not counted.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import runpy
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["DEFAULT_FUNCTIONS", "ThreadCpu", "main", "table"]

DEFAULT_FUNCTIONS = (
    "server.plan.run:Run._update", "server.plan.run:Run._fed", "server.plan.run:Run.check",
    "server.plan.run:Run.__init__", "server.plan.build:build_plan",
    "server.messages.message_stream:MessageStream.feed",
    "server.api.middleware:_access_line",
    "server.engine.vllm_engine:VllmEngine.validate", "server.engine.vllm_engine:VllmEngine._sampling_params",
    "server.chat.sse:ContentFrames.content",
    "vllm.v1.engine.output_processor:OutputProcessor.process_outputs",
    "vllm.v1.engine.output_processor:RequestOutputCollector.put",
    "vllm.v1.engine.input_processor:InputProcessor.process_inputs",
    "vllm.v1.serial_utils:MsgpackDecoder.decode", "vllm.v1.serial_utils:MsgpackEncoder.encode",
    "zmq.sugar.socket:Socket.send_multipart",
    # asyncio's own loop and transport: they read 0 under uvloop (``--event-loop auto`` where it is
    # installed), whose loop and transports are C; run the server with ``--event-loop asyncio`` to see them
    "asyncio.selector_events:_SelectorSocketTransport.write",
    "asyncio.base_events:BaseEventLoop._run_once",
)


class ThreadCpu:
    """Per process: running totals (ns, calls) of the wrapped functions on one thread."""

    def __init__(self, *, thread: int | None = None) -> None:
        self.thread = thread if thread is not None else threading.get_ident()
        self.totals: dict[str, list[int]] = {}
        self.skipped: list[str] = []

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` counted under ``name``: calls on the thread, not those nested inside another call of it."""
        total = self.totals.setdefault(name, [0, 0])
        clock = time.thread_time_ns
        inside = [False]

        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            if inside[0] or threading.get_ident() != self.thread:
                return fn(*args, **kwargs)
            inside[0] = True
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                total[0] += clock() - start
                total[1] += 1
                inside[0] = False

        return counted

    def patch(self, specs: Sequence[str]) -> None:
        """Wrap each ``module:Qual.name`` in place; one that does not import or exist is skipped (listed)."""
        for spec in specs:
            module, _, qual = spec.partition(":")
            try:
                owner: Any = importlib.import_module(module)
                *path, attr = qual.split(".")
                for part in path:
                    owner = getattr(owner, part)
                fn = getattr(owner, attr)
            except (ImportError, AttributeError):
                self.skipped.append(spec)
                continue
            counted = self.wrap(spec, fn)
            setattr(owner, attr, counted)
            if not path:  # a module's function: also where a loaded module re-exports it (``from x import f``)
                for other in list(sys.modules.values()):
                    # (its own namespace only: a lazy module's __getattr__ would import things)
                    if isinstance(getattr(other, "__dict__", None), dict) and other.__dict__.get(attr) is fn:
                        setattr(other, attr, counted)

    def snapshot(self) -> dict[str, Any]:
        """The totals so far, with the thread's and the process's whole CPU (ms)."""
        thread_ns = time.clock_gettime_ns(time.pthread_getcpuclockid(self.thread))
        return {"thread_ms": thread_ns / 1e6, "process_ms": time.process_time_ns() / 1e6,
                "functions": {k: {"ms": ns / 1e6, "calls": n} for k, (ns, n) in self.totals.items()},
                "skipped": list(self.skipped)}


def table(pairs: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """A markdown table of what happened between each target's two snapshots: ms (calls) per function."""
    spent: dict[str, dict[str, tuple[float, int]]] = {}
    for target, (before, after) in pairs.items():
        rows = {"main thread": (after["thread_ms"] - before["thread_ms"], 0),
                "process": (after["process_ms"] - before["process_ms"], 0)}
        for name, now in after["functions"].items():
            was = before["functions"].get(name, {"ms": 0.0, "calls": 0})
            rows[name] = (now["ms"] - was["ms"], now["calls"] - was["calls"])
        spent[target] = rows
    names = list(dict.fromkeys(name for rows in spent.values() for name in rows))
    lines = ["| function | " + " | ".join(f"{t} ms (calls)" for t in spent) + " |",
             "|---|" + "---|" * len(spent)]
    for name in names:
        cells = [spent[t].get(name, (0.0, 0)) for t in spent]
        lines.append(f"| {name} | " + " | ".join(f"{ms:.0f} ({calls})" if calls else f"{ms:.0f}" for ms, calls in cells) + " |")
    return "\n".join(lines)


def _dump_every(tally: ThreadCpu, out: str, every: float) -> None:
    while True:
        time.sleep(every)
        tmp = f"{out}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(tally.snapshot(), f)
        os.replace(tmp, out)  # a reader never sees half a snapshot


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.thread_cpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run MODULE ARGS... as __main__ with the functions counted")
    run.add_argument("--out", required=True, help="the JSON snapshot, rewritten every --every seconds")
    run.add_argument("--every", type=float, default=0.5)
    run.add_argument("--functions", default="", help="more module:Qual.name specs, comma-separated")
    run.add_argument("module")
    run.add_argument("args", nargs=argparse.REMAINDER)
    show = sub.add_parser("table", help="what each target's load cost: NAME=BEFORE.json:AFTER.json ...")
    show.add_argument("pairs", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "table":
        pairs = {}
        for spec in args.pairs:
            name, _, files = spec.partition("=")
            before, _, after = files.partition(":")
            if not (name and before and after):
                parser.error(f"{spec!r}: write NAME=BEFORE.json:AFTER.json")
            with open(before, encoding="utf-8") as b, open(after, encoding="utf-8") as a:
                pairs[name] = (json.load(b), json.load(a))
        print(table(pairs))
        return
    sys.path.insert(0, os.getcwd())
    tally = ThreadCpu()
    tally.patch([*DEFAULT_FUNCTIONS, *filter(None, args.functions.split(","))])
    for spec in tally.skipped:
        print(f"bench.thread_cpu: not counted (not found): {spec}", file=sys.stderr)
    threading.Thread(target=_dump_every, args=(tally, args.out, args.every), daemon=True).start()
    rest = args.args[1:] if args.args[:1] == ["--"] else args.args
    sys.argv = [args.module, *rest]
    runpy.run_module(args.module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
