"""The benchmark's own arithmetic and plumbing: percentiles, cell summaries, /proc parsing,
SSE parsing, ratios, and the load generator against a tiny in-process fake SSE server
(no model; a few seconds)."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from bench._proc import ProcStat, cpu_sample, descendants, parse_stat
from bench.compare import EngineFlags, interleaved_order, plot_ratios, ratio_rows, ratio_table, vllm_cmd
from bench.serve import Cell, RequestResult, markdown_table, parse_sse_line, percentile, run_cell, summarize
from bench.workloads import WORKLOADS, build_workload


# ------------------------------------------------------------------ statistics


def test_percentile_matches_numpy_linear_interpolation() -> None:
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(7)
    for n in (1, 2, 5, 20, 101):
        xs = rng.exponential(size=n).tolist()
        for q in (0, 25, 50, 90, 95, 100):
            assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))


def test_percentile_small_cases() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([4, 1, 3, 2], 50) == 2.5  # unsorted input
    assert percentile(list(range(1, 21)), 95) == pytest.approx(19.05)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summarize_counts_only_good_requests() -> None:
    results = [RequestResult(ok=True, ttft=0.1, itls=[0.01, 0.03], e2e=1.0, tokens=10),
               RequestResult(ok=True, ttft=0.3, itls=[0.02], e2e=2.0, tokens=30),
               RequestResult(ok=False, e2e=0.5, tokens=99, error="HTTP 400: no")]
    c = summarize(results, wall_s=4.0, target="t", workload="plain", concurrency=2, max_tokens=32, cpu=(0.8, 2.0),
                  cpu_api_sys=0.2)
    assert (c.requests, c.errors, c.tokens) == (3, 1, 40)
    assert c.req_per_s == pytest.approx(0.5) and c.tok_per_s == pytest.approx(10.0)
    assert c.ttft_p50 == pytest.approx(0.2) and c.itl_p50 == pytest.approx(0.02)
    assert c.e2e_p95 == pytest.approx(1.95)
    assert c.cpu_api_per_1k == pytest.approx(20.0) and c.cpu_engine_per_1k == pytest.approx(50.0)
    assert c.api_sys_share == pytest.approx(0.25)
    assert c.first_error == "HTTP 400: no"
    assert c.as_dict()["cpu_api_per_1k"] == pytest.approx(20.0)
    row = markdown_table([c]).splitlines()
    assert len(row) == 3 and row[1].count("---") == row[0].count("|") - 1
    assert "| 200/290 |" in row[2]  # TTFT p50/p95 in ms
    # API CPU (3 decimals: 0.04 s per 1k tokens is a common figure), its kernel share in %, engine CPU
    assert "| 20.000 | 25 | 50.00 |" in row[2]


# ------------------------------------------------------------------ /proc


def test_parse_stat_with_awkward_command_name() -> None:
    # comm may hold spaces and parentheses; fields are counted after the last ')'
    line = "4242 (VLLM::Worker (x) y) S 4200 4200 4200 0 -1 4194560 100 0 0 0 1234 56 7 8 20 0 3 0 99 0\n"
    st = parse_stat(line)
    assert (st.pid, st.comm, st.ppid, st.utime, st.stime) == (4242, "VLLM::Worker (x) y", 4200, 1234, 56)


def test_descendants_walks_the_whole_tree() -> None:
    stats = [ProcStat(1, "init", 0, 0, 0), ProcStat(10, "api", 1, 0, 0), ProcStat(11, "core", 10, 0, 0),
             ProcStat(12, "worker", 11, 0, 0), ProcStat(20, "other", 1, 0, 0)]
    assert sorted(s.pid for s in descendants(10, stats)) == [11, 12]
    assert descendants(12, stats) == []


def test_cpu_sample_counts_a_busy_child() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time\nt=time.process_time()\n"
                              "while time.process_time()-t<0.4: pass\ntime.sleep(5)"])
    try:
        before = cpu_sample(os.getpid())
        deadline = time.monotonic() + 10
        kids = 0.0
        while time.monotonic() < deadline and kids < 0.3:
            time.sleep(0.1)
            _, kids = cpu_sample(os.getpid()).minus(before)
        assert child.pid in cpu_sample(os.getpid()).children
        assert kids >= 0.3  # the child's busy loop, seen while it is alive
    finally:
        child.kill()
        child.wait()
    with pytest.raises(ProcessLookupError):
        cpu_sample(2**22 + 12345)


def test_cpu_sample_splits_out_kernel_time() -> None:
    """System calls land in ``own_system`` (a server's socket writes), pure Python does not.

    The writes go on until the kernel itself (``os.times``) has counted 0.3 s of system time,
    so a machine where a write costs little kernel time still gets there (bounded at 10 s)."""
    before = cpu_sample(os.getpid())
    start, deadline = os.times().system, time.monotonic() + 10.0
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        while os.times().system - start < 0.3 and time.monotonic() < deadline:
            for _ in range(1000):
                os.write(fd, b"x" * 4096)
    finally:
        os.close(fd)
    kernel = os.times().system - start
    mid = cpu_sample(os.getpid())
    t = time.process_time()
    n = 0
    while time.process_time() - t < 0.5:  # (process_time is itself a system call: call it rarely)
        for _ in range(100_000):
            n += 1
    after = cpu_sample(os.getpid())
    assert kernel >= 0.3, f"10 s of writes made only {kernel:.2f} s of kernel time"
    assert mid.system_since(before) >= kernel - 0.05  # the same counter, read from /proc (10 ms ticks)
    assert after.system_since(mid) < 0.5 * after.minus(mid)[0]  # a Python loop: mostly user time


# ------------------------------------------------------------------ SSE parsing


def _data(obj: object) -> str:
    return "data: " + json.dumps(obj)


def test_parse_sse_line() -> None:
    assert parse_sse_line(": keep-alive") == (False, None, None)
    assert parse_sse_line("data: [DONE]") == (False, None, None)
    assert parse_sse_line(_data({"choices": [{"delta": {"role": "assistant", "content": ""}}]})) == (False, None, None)
    assert parse_sse_line(_data({"choices": [{"delta": {"content": "hi"}}]})) == (True, None, None)
    args = {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\""}}]}}]}
    assert parse_sse_line(_data(args))[0] is True
    assert parse_sse_line(_data({"choices": [], "usage": {"completion_tokens": 7}})) == (False, 7, None)
    assert parse_sse_line(_data({"error": {"message": "boom"}})) == (False, None, "boom")


# ------------------------------------------------------------------ the load generator, against a fake server

DELTAS = 6
STEP_S = 0.01


class FakeSSEServer:
    """A tiny HTTP/1.1 server streaming ``DELTAS`` content deltas, one every ``STEP_S``; it
    remembers the bodies it got and the most timed requests (``max_tokens`` 32; the warm-up
    sends 16) it had in flight at once."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list[dict] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        length = next((int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length")), 0)
        body = json.loads(await reader.readexactly(length)) if length else {}
        if lines[0].startswith("GET /v1/models"):
            data = json.dumps({"data": [{"id": "fake"}]}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (len(data), data))
        elif body.get("messages") == [{"role": "user", "content": "fail"}]:
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno")
        else:
            self.bodies.append(body)
            timed = body.get("max_tokens") == 32
            self.in_flight += timed
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            writer.write((_data({"choices": [{"delta": {"role": "assistant", "content": ""}}]}) + "\n\n").encode())
            for i in range(DELTAS):
                await asyncio.sleep(STEP_S)
                writer.write((_data({"choices": [{"index": 0, "delta": {"content": f"t{i}"}}]}) + "\n\n").encode())
                await writer.drain()
            writer.write((_data({"choices": [], "usage": {"completion_tokens": DELTAS}}) + "\n\ndata: [DONE]\n\n")
                         .encode())
            self.in_flight -= timed
        await writer.drain()
        writer.close()


async def _run_against_fake(concurrency: int, requests: int) -> tuple[Cell, FakeSSEServer]:
    fake = FakeSSEServer()
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/v1/", timeout=10) as client:
            cell = await run_cell(client, target="fake", workload="plain", concurrency=concurrency, max_tokens=32,
                                  requests=requests, server_pid=os.getpid(), model="fake")
    finally:
        server.close()
        await server.wait_closed()
    return cell, fake


def test_load_generator_against_fake_sse_server() -> None:
    cell, fake = asyncio.run(_run_against_fake(concurrency=3, requests=7))
    assert (cell.requests, cell.errors, cell.tokens) == (7, 0, 7 * DELTAS)
    assert fake.max_in_flight == 3  # the concurrency, never more
    warm = build_workload("plain", max_tokens=16)
    seen = sorted(json.dumps(b["messages"]) for b in fake.bodies[:len(warm)])
    assert seen == sorted(json.dumps(b["messages"]) for b in warm)  # the warm-up first, all bodies once
    timed = fake.bodies[len(warm):]
    assert len(timed) == 7 and all(b["stream"] and b["stream_options"] == {"include_usage": True} for b in timed)
    assert all(b["model"] == "fake" and b["max_tokens"] == 32 and b["ignore_eos"] for b in timed)
    assert cell.ttft_p50 >= STEP_S * 0.9 and cell.itl_p50 >= STEP_S * 0.9
    assert cell.e2e_p50 >= DELTAS * STEP_S * 0.9
    assert cell.tok_per_s > 0 and cell.cpu_api_s is not None and cell.cpu_api_s >= 0


def test_load_generator_reports_http_errors() -> None:
    from bench.serve import stream_one

    async def go() -> RequestResult:
        fake = FakeSSEServer()
        server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/v1/", timeout=10) as client:
            res = await stream_one(client, {"messages": [{"role": "user", "content": "fail"}]})
        server.close()
        return res

    res = asyncio.run(go())
    assert not res.ok and res.error.startswith("HTTP 400")


def test_interleaved_run_alternates_the_servers_cell_by_cell() -> None:
    """``--interleave``: both servers up, each cell on one then the other, the order flipping by
    cell and by repeat, so each target goes first equally often."""
    import argparse
    import types

    from bench.compare import _interleaved_cells

    arrivals: list[str] = []

    class Recording(FakeSSEServer):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        async def handle(self, reader, writer) -> None:
            n = len(self.bodies)
            await super().handle(reader, writer)
            if len(self.bodies) > n and self.bodies[-1].get("max_tokens") == 32:  # a timed request
                arrivals.append(self.name)

    async def go(rep: int) -> list[Cell]:
        fakes = {name: Recording(name) for name in ("gramserve", "vllm")}
        started = {name: await asyncio.start_server(f.handle, "127.0.0.1", 0) for name, f in fakes.items()}
        me = types.SimpleNamespace(pid=os.getpid(), poll=lambda: None)
        servers = {name: types.SimpleNamespace(port=s.sockets[0].getsockname()[1], proc=me)
                   for name, s in started.items()}
        a = argparse.Namespace(workloads=["plain"], concurrency=[1, 2], lengths=[32], requests=2, settle=False)
        try:
            return await _interleaved_cells(servers, a, rep)
        finally:
            for s in started.values():
                s.close()

    for rep, first in ((0, "gramserve"), (1, "vllm")):
        arrivals.clear()
        cells = asyncio.run(go(rep))
        second = "vllm" if first == "gramserve" else "gramserve"
        assert [(c.target, c.concurrency) for c in cells] == [(first, 1), (second, 1), (second, 2), (first, 2)]
        assert all(c.requests == 2 and not c.errors for c in cells)
        assert arrivals == [first] * 2 + [second] * 4 + [first] * 2  # one server's cell done before the other's
    assert [interleaved_order(["a", "b", "c"], k) for k in (0, 1, 2, 3)] == [["a", "b", "c"], ["b", "c", "a"],
                                                                            ["c", "a", "b"], ["a", "b", "c"]]
    assert [interleaved_order(["a", "b"], k) for k in (0, 1)] == [["a", "b"], ["b", "a"]]


# ------------------------------------------------------------------ workloads and comparison


def test_workloads_are_fixed_and_deterministic() -> None:
    for name in WORKLOADS:
        a, b = build_workload(name, max_tokens=33), build_workload(name, max_tokens=33)
        assert a == b and a and all(x["max_tokens"] == 33 and x["temperature"] == 0 for x in a)
    assert all(b["tool_choice"] == "required" for b in build_workload("tools", max_tokens=8))
    agent = build_workload("agent", max_tokens=8)
    lengths = [len(b["messages"]) for b in agent]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]  # growing history, shared prefix
    assert agent[2]["messages"][:5] == agent[1]["messages"][:5]


def _cell(target: str, tok_s: float, ttft: float, cpu: float, workload: str = "plain") -> Cell:
    return Cell(target=target, workload=workload, concurrency=1, max_tokens=64, requests=4, errors=0, wall_s=1.0,
                tokens=1000, req_per_s=1.0, tok_per_s=tok_s, ttft_p50=ttft, ttft_p95=ttft, itl_p50=0.01,
                itl_p95=0.02, e2e_p50=1.0, e2e_p95=1.0, cpu_api_s=cpu, cpu_engine_s=10.0)


def test_ratio_rows_pair_repeats_and_report_spread(tmp_path) -> None:
    runs = [[_cell("gramserve", 100, 0.2, 1.0), _cell("vllm", 50, 0.1, 2.0), _cell("engine", 100, 0.1, 0.5)],
            [_cell("gramserve", 90, 0.3, 1.0), _cell("vllm", 90, 0.1, 1.0), _cell("engine", 90, 0.2, 1.0)],
            [_cell("gramserve", 80, 0.2, 3.0), _cell("vllm", 100, 0.2, 1.0), _cell("engine", 80, 0.2, 1.0)]]
    (row,) = ratio_rows(runs)
    assert row["tok_per_s/vllm"] == pytest.approx((1.0, 0.8, 2.0))
    assert row["ttft_p50/vllm"] == pytest.approx((2.0, 1.0, 3.0))
    assert row["cpu_api_per_1k/vllm"] == pytest.approx((1.0, 0.5, 3.0))
    assert row["tok_per_s/engine"] == pytest.approx((1.0, 1.0, 1.0))
    runs[0][0].req_per_s = 2.0  # requests/s beside tokens/s: answers may differ in length by target
    assert ratio_rows(runs)[0]["req_per_s/vllm"] == pytest.approx((1.0, 1.0, 2.0))
    runs[0][0].req_per_s = 1.0
    runs[2][1].errors = 1  # a failed cell leaves the ratios
    assert ratio_rows(runs)[0]["tok_per_s/vllm"] == pytest.approx((1.5, 1.0, 2.0))
    table = ratio_table([row])
    assert "| plain | 1 | 64 | 1.00 (0.80-2.00) |" in table and "| 1.00 |" in table
    pytest.importorskip("matplotlib")
    png = tmp_path / "r.png"
    plot_ratios([row], str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_vllm_server_gets_gramserve_engine_settings(monkeypatch) -> None:
    """The vLLM server's flags spell out what ``gramserve serve`` applies on CPU."""
    import server.runner as runner
    from server.config import settings_from_args

    for var in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_XGRAMMAR_CACHE_MB", runner.ENGINE_PLUGIN_FLAG):
        monkeypatch.setenv(var, os.environ.get(var, ""))  # restored after the test
    monkeypatch.setattr(runner, "is_cpu_only", lambda: True)
    flags = EngineFlags(max_model_len=2048, kv_cache_gib=3, max_num_seqs=16, model=__import__("pathlib").Path("/m"))
    options = runner.engine_options(settings_from_args(flags.gramserve_args()))
    cmd = vllm_cmd(8000, flags, model=__import__("pathlib").Path("/m"))
    opt = {k: v for k, v in zip(cmd, cmd[1:]) if k.startswith("--")}
    assert int(opt["--max-model-len"]) == options.max_model_len == 2048
    assert int(opt["--max-num-batched-tokens"]) == options.max_num_batched_tokens
    assert float(opt["--gpu-memory-utilization"]) == options.gpu_memory_utilization
    assert opt["--dtype"] == options.dtype and options.enforce_eager and "--enforce-eager" in cmd
    assert options.enable_chunked_prefill is False and "--no-enable-chunked-prefill" in cmd
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == flags.env()["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert opt["--max-num-seqs"] == "16" and opt["--tool-call-parser"] == "hermes"
    assert json.loads(opt["--structured-outputs-config"]) == {"backend": "xgrammar", "disable_any_whitespace": True}


def test_pyspy_top_self_and_inclusive_shares() -> None:
    from bench.pyspy_top import parse_collapsed, top_functions

    lines = ["run (asyncio/base_events.py:600);handle (/work/main/server/chat/sse.py:10);dumps (json/__init__.py:231) 6",
             "run (asyncio/base_events.py:600);handle (/work/main/server/chat/sse.py:12) 3",
             "run (asyncio/base_events.py:601);parse (/x/site-packages/tool_parsers/hermes.py:40) 1",
             "garbage line without a count"]
    stacks = parse_collapsed(lines)
    assert len(stacks) == 3 and stacks[0][0][1] == "handle (server/chat/sse.py)"  # repo prefix and line dropped
    total, own, incl = top_functions(stacks)
    assert total == 10
    assert own["dumps (json/__init__.py)"] == 6 and own["handle (server/chat/sse.py)"] == 3
    assert incl["handle (server/chat/sse.py)"] == 9 and incl["run (asyncio/base_events.py)"] == 10
    assert incl["parse (tool_parsers/hermes.py)"] == 1
    from bench.pyspy_top import IDLE_LEAVES

    waiting = ["_bootstrap (threading.py:1002);_worker (concurrent/futures/thread.py:81) 50",
               "run (asyncio/base_events.py:600);select (selectors.py:469) 20"]
    assert parse_collapsed(lines + waiting, drop_leaf=IDLE_LEAVES) == stacks  # waits are not work


def test_capacity_is_the_highest_concurrency_holding_itl_p99_under_twice_c1() -> None:
    from bench.serve import Cell, capacity_rows, capacity_table

    def cell(conc: int, itl_p99: float) -> Cell:
        return Cell(target="gramserve", workload="plain", concurrency=conc, max_tokens=128, requests=8, errors=0,
                    wall_s=1.0, tokens=1000, req_per_s=1.0, tok_per_s=100.0 * conc, ttft_p50=0.1, ttft_p95=0.2,
                    itl_p50=0.01, itl_p95=0.02, e2e_p50=1.0, e2e_p95=1.0, ttft_p99=0.3, itl_p99=itl_p99)

    cells = [cell(1, 0.010), cell(8, 0.015), cell(32, 0.019), cell(64, 0.021), cell(128, 0.018)]
    (row,) = capacity_rows(cells)
    assert row["concurrency"] == 128 and row["itl_p99_c1"] == 0.010  # 64 broke it, 128 held again: highest held
    (row,) = capacity_rows(cells[:4])
    assert row["concurrency"] == 32 and row["tok_per_s"] == 3200.0
    assert capacity_rows(cells[1:]) == []  # no c1 cell: no base to hold
    assert "| gramserve | plain | 128 | 10.0 | 32 |" in capacity_table(cells[:4])


def test_bench_dtype_follows_the_cpu(tmp_path) -> None:
    """bf16 only where the CPU computes it; every target gets the same dtype."""
    from bench.compare import default_dtype

    avx2, amx = tmp_path / "avx2", tmp_path / "amx"
    avx2.write_text("flags\t\t: fpu sse sse2 avx avx2 fma\n")
    amx.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    assert default_dtype(avx2) == "float32" and default_dtype(amx) == "bfloat16"
    flags = EngineFlags(max_model_len=2048, kv_cache_gib=1, max_num_seqs=None, dtype="float32")
    for cmd in (flags.gramserve_args(), vllm_cmd(8000, flags, model=__import__("pathlib").Path("/m"))):
        assert cmd[cmd.index("--dtype") + 1] == "float32"


def test_settle_waits_for_every_server_to_go_quiet(monkeypatch) -> None:
    """An interleaved cell starts once the servers' trees (engines included) are quiet, or at the limit."""
    import asyncio

    import bench.compare as compare
    from bench._proc import CpuSample

    busy = {"left": 3}  # windows in which the second server's engine still spins

    def sample(pid: int) -> CpuSample:
        sample.t += 0.2 if (pid == 2 and busy["left"] > 0) else 0.0  # CPU seconds per look
        if pid == 2:
            busy["left"] -= 1 if busy["left"] > 0 else 0
        return CpuSample(own=0.0, children={99: sample.t})
    sample.t = 0.0
    monkeypatch.setattr(compare, "cpu_sample", sample)
    waited = asyncio.run(compare.settle([1, 2], window=0.01, limit=5.0))
    assert busy["left"] == 0 and 0.02 <= waited < 1.0  # two busy windows seen, then a quiet one
    busy["left"] = 10 ** 9  # never quiet: the limit ends the wait
    assert 0.05 <= asyncio.run(compare.settle([1, 2], window=0.01, limit=0.05)) < 1.0
