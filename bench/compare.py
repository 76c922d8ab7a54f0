"""gramserve vs vLLM's own OpenAI server vs the engine called directly, in one run.

All three drive the same vLLM engine with the same settings (those ``gramserve serve``
applies on this platform: dtype, context length, eager mode, no chunked prefill, batch
token budget, KV cache space, XGrammar without free whitespace, vLLM's generation
defaults), the same chat template (``chat_templates/hermes.jinja``) and the same requests
(:mod:`bench.workloads`), so every difference is the front end's. On a small machine only
one runs at a time: gramserve's cells, then the vLLM server's, then the engine's, and
again for each ``--repeats``; with ``--interleave`` both servers stay up and each cell runs
on one right after the other (order rotating, so each takes each place in turn), so load that drifts
during a run lands on both alike. Prints every cell, then per cell the ratios
gramserve/vLLM-server and gramserve/engine (median of the repeats, with min-max) of
throughput, TTFT p50 and front-end (API process) CPU per token; ``--plot`` draws them.

    python -m bench.compare --quick                    # concurrency 1 and 8, 64 tokens
    python -m bench.compare --concurrency 1,8,32 --max-tokens 128 --repeats 2 --json out.json --plot ratios.png
    python -m bench.compare --interleave --targets gramserve,vllm --concurrency 8,32 --repeats 2
    python -m bench.compare --workloads plain,tools_long --lengths 128,1024,4096 --concurrency 2 \
        --targets gramserve,vllm --max-model-len 8192     # CPU per token vs output length
    python -m bench.compare --model standin --interleave --targets gramserve,vllm,engine --concurrency 32

``--model standin`` runs every target on :mod:`bench.standin` (a 1-layer random Llama with SmolLM2's
tokenizer: the same real vLLM engine at thousands of tokens/s), so the front end is the ceiling,
as on a GPU.
"""
from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import httpx

from bench._proc import CpuSplit, cpu_sample, cpu_split, pin_tree
from bench.serve import Cell, capacity_table, default_requests, markdown_table, run_cell

__all__ = ["EngineFlags", "MODELS", "model_dir", "gramserve_cmd", "vllm_cmd", "interleaved_order", "ratio_rows", "ratio_table", "plot_ratios",
           "main"]

REPO = Path(__file__).resolve().parents[1]
PY = REPO / ".venv" / "bin" / "python"
TARGETS = ("gramserve", "vllm", "engine")  # the default; also "transport" (bench/transport_floor.py) and gramserve@REF
MODEL_NAME = "SmolLM2-135M-Instruct"
# Throughput twice: tokens/s is like for like where every target writes the same tokens (plain runs
# to max_tokens); json_schema and tools answers differ by target (vLLM's server writes `required`
# calls in its own format; gramserve's repeat guard and loop breaker end looping answers sooner),
# so there requests/s, the same requests answered whole, is the fairer reading.
METRICS = (("tok_per_s", "throughput (tok/s)"), ("req_per_s", "requests/s"), ("ttft_p50", "TTFT p50"),
           ("cpu_api_per_1k", "API CPU / token"))
HIGHER_IS_BETTER = ("tok_per_s", "req_per_s")


class EngineFlags:
    """The engine settings every target gets (gramserve's CPU defaults, spelled out)."""

    def __init__(self, *, max_model_len: int, kv_cache_gib: float, max_num_seqs: int | None,
                 stream_interval: int = 1, model: Path | None = None, api_server_count: int = 1,
                 split: CpuSplit | None = None, dtype: str = "bfloat16") -> None:
        self.model = model
        self.dtype = dtype
        self.split = split  # None: every process may run on every CPU  # None: gramserve's embedded default
        self.api_server_count = api_server_count
        self.max_model_len = max_model_len
        self.kv_cache_gib = kv_cache_gib
        self.max_num_seqs = max_num_seqs
        self.stream_interval = stream_interval

    def _common(self) -> list[str]:
        """Flags both servers spell the same way."""
        return ((["--max-num-seqs", str(self.max_num_seqs)] if self.max_num_seqs else [])
                + (["--stream-interval", str(self.stream_interval)] if self.stream_interval > 1 else [])
                + (["--api-server-count", str(self.api_server_count)] if self.api_server_count > 1 else []))

    def gramserve_args(self) -> list[str]:
        args = ["--max-model-len", str(self.max_model_len), "--kv-cache-space", f"{self.kv_cache_gib:g}",
                "--dtype", self.dtype, "--enforce-eager", "--seed", "0"]
        if self.model is not None:  # the default model's name and template, on another folder
            args += ["--model", str(self.model), "--served-model-name", MODEL_NAME, "--chat-template", "hermes"]
        return args + self._common()

    def vllm_args(self) -> list[str]:
        # what server/runner.py's engine_options + server/engine/vllm_engine.py pass on CPU
        args = ["--max-model-len", str(self.max_model_len), "--dtype", self.dtype, "--enforce-eager", "--seed", "0",
                "--gpu-memory-utilization", "0.1", "--no-enable-chunked-prefill",
                "--max-num-batched-tokens", str(max(self.max_model_len, 2048)), "--generation-config", "vllm",
                "--structured-outputs-config", json.dumps({"backend": "xgrammar", "disable_any_whitespace": True})]
        return args + self._common()

    def env(self) -> dict[str, str]:
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": f"{self.kv_cache_gib:g}"}
        if self.split is not None:  # the CPU worker's OpenMP threads bind to the engine's CPUs
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.split.omp_bind()
        return env


MODELS = ("smollm2", "standin")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def default_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """bfloat16 where the CPU computes it natively (AVX512-BF16, AMX), float32 elsewhere: on an AVX2-only
    CPU vLLM's bf16 kernels convert every weight, and the stand-in's engine ran 4.5x slower in bf16 than in
    float32 (382 against 2,031 tok/s, plain c32, an AMD EPYC with AVX2), so the engine, not the front end,
    set every figure."""
    try:
        flags = cpuinfo.read_text().split()
    except OSError:
        return "bfloat16"
    return "bfloat16" if any(flag in flags for flag in BF16_FLAGS) else "float32"


def model_dir(name: str = "smollm2") -> Path:
    """The folder every target serves: the embedded SmolLM2, or the fast stand-in built from it."""
    if name == "standin":
        from bench.standin import ensure_standin

        return ensure_standin()
    from server.default_model import ensure_default_model

    return Path(ensure_default_model())


def gramserve_cmd(port: int, flags: EngineFlags) -> list[str]:
    return [str(REPO / ".venv" / "bin" / "gramserve"), "serve", "--port", str(port), *flags.gramserve_args()]


def checkout(ref: str) -> Path:
    """A detached worktree of ``ref`` (made once, under /tmp) for a ``gramserve@REF`` target: gramserve
    as it was at that commit, run by this checkout's Python (``python -m server`` from that folder)."""
    sha = subprocess.run(["git", "rev-parse", "--short", ref], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"gramserve-{sha}"
    if not (path / "server").is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", "--force", str(path), sha], cwd=REPO, check=True,
                       capture_output=True)
    return path


def vllm_cmd(port: int, flags: EngineFlags, model: Path) -> list[str]:
    # vLLM's api_server entry point runs one API process; bench.vllm_server takes `vllm serve`'s path
    entry = "bench.vllm_server" if flags.api_server_count > 1 else "vllm.entrypoints.openai.api_server"
    return [str(PY), "-m", entry, "--model", str(model),
            "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
            "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
            "--chat-template", str(REPO / "chat_templates" / "hermes.jinja"), *flags.vllm_args()]


def _start(cmd: list[str], env: dict[str, str], port: int, log: Path, timeout: float = 900,
           cwd: Path = REPO, split: CpuSplit | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=cwd,
                            start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{cmd[0]} exited with {proc.returncode} while starting; see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                if split is not None:
                    front, engine = pin_tree(proc.pid, split)
                    print(f"# {cmd[0]}: {front} API threads on CPUs {sorted(split.front)}, {engine} engine threads "
                          f"on CPUs {sorted(split.engine)}", flush=True)
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(1)
    _stop(proc)
    raise SystemExit(f"no /health 200 on port {port} after {timeout:.0f} s; see {log}")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (its engine processes too), SIGKILL after 30 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass
    time.sleep(2)  # let the engine's children go before the next server starts


def _grid(a: argparse.Namespace) -> list[tuple[str, int, int]]:
    return [(w, c, n) for n in a.lengths for w in a.workloads for c in a.concurrency]


async def _http_cell(client: httpx.AsyncClient, target: str, server: "_Server", a: argparse.Namespace,
                     workload: str, conc: int, n: int) -> Cell:
    """One cell against one server; a server that died under it is restarted and the cell redone once."""
    for attempt in (1, 2):
        cell = await run_cell(client, target=target, workload=workload, concurrency=conc, max_tokens=n,
                              requests=a.requests or default_requests(conc), server_pid=server.proc.pid,
                              model=MODEL_NAME)
        if not cell.errors or server.proc.poll() is None or attempt == 2:
            break
        # the server died under us (on a shared machine: the OOM killer); start it again, redo the cell
        print(f"# {target} exited ({server.proc.returncode}) during {workload} c{conc}; restarting", flush=True)
        server.restart()
    print(markdown_table([cell]).splitlines()[-1], flush=True)
    return cell


def _client(port: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/v1/", timeout=1800, limits=limits)


async def _http_cells(target: str, server: "_Server", a: argparse.Namespace) -> list[Cell]:
    async with _client(server.port) as client:
        return [await _http_cell(client, target, server, a, w, c, n) for w, c, n in _grid(a)]


def interleaved_order(targets: Sequence[str], k: int) -> list[str]:
    """The targets' order for the k-th cell of an interleaved run: rotated by one each cell, so every
    target takes every place as often as the others (two targets: as given, then reversed), and load
    that drifts during a run lands on all alike. (Reversing three targets kept the middle one in the
    middle: the first place of a cell after a c128 cell is where the runs stall, and it never fell to it.)"""
    i = k % max(1, len(targets))
    return list(targets[i:]) + list(targets[:i])


async def settle(pids: Sequence[int], *, quiet: float = 0.05, window: float = 0.5, limit: float = 20.0) -> float:
    """Wait until the servers' processes (each with its engine) together use under ``quiet`` of one CPU
    over ``window`` seconds, at most ``limit`` seconds; the seconds waited. A cell then starts on a
    machine the last cell no longer loads (an engine's idle spin, a server's clean-up)."""
    t0 = time.monotonic()
    while True:
        try:
            before = [cpu_sample(pid) for pid in pids]
            await asyncio.sleep(window)
            used = sum(sum(cpu_sample(pid).minus(b)) for b, pid in zip(before, pids, strict=True))  # own + engine
        except ProcessLookupError:  # a server died: the cell's own restart handles it
            return time.monotonic() - t0
        if used < quiet * window or time.monotonic() - t0 >= limit:
            return time.monotonic() - t0


async def _interleaved_cells(servers: dict[str, "_Server"], a: argparse.Namespace, rep: int) -> list[Cell]:
    """Every cell on every running server back to back (order rotating by cell and by repeat), each on
    a settled machine (``settle``)."""
    clients = {t: _client(s.port) for t, s in servers.items()}
    try:
        cells = []
        for i, (w, c, n) in enumerate(_grid(a)):
            for target in interleaved_order(list(servers), i + rep):
                waited = await settle([s.proc.pid for s in servers.values()]) if a.settle else 0.0
                if waited >= 1.0:
                    print(f"# waited {waited:.1f} s for the servers to go quiet before {target} {w} c{c}", flush=True)
                cells.append(await _http_cell(clients[target], target, servers[target], a, w, c, n))
        return cells
    finally:
        for client in clients.values():
            await client.aclose()


class _Server:
    """One server process at a time, restartable."""

    def __init__(self, cmd: list[str], env: dict[str, str], port: int, log: Path, cwd: Path = REPO,
                 split: CpuSplit | None = None) -> None:
        self.cmd, self.env, self.port, self.log, self.cwd, self.split = cmd, env, port, log, cwd, split
        self.starts = 0
        self.proc = self._start()

    def _start(self) -> subprocess.Popen:
        self.starts += 1
        log = self.log if self.starts == 1 else self.log.with_suffix(f".{self.starts}.log")
        return _start(self.cmd, self.env, self.port, log, cwd=self.cwd, split=self.split)

    def restart(self) -> None:
        _stop(self.proc)
        self.proc = self._start()

    def stop(self) -> None:
        _stop(self.proc)


def _engine_cells(a: argparse.Namespace, flags: EngineFlags, log: Path) -> list[Cell]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    cmd = [str(PY), "-m", "bench.engine_direct", "--workloads", ",".join(a.workloads),
           "--concurrency", ",".join(map(str, a.concurrency)), "--max-tokens", ",".join(map(str, a.lengths)),
           "--json", str(out)] + (["--requests", str(a.requests)] if a.requests else []) + (
               ["--pin-cpus", flags.split.spec()] if flags.split else []) + ["--",
                                                                                            *flags.gramserve_args()]
    with log.open("w") as lf:
        rc = subprocess.run(cmd, env=flags.env(), stdout=lf, stderr=subprocess.STDOUT, cwd=REPO).returncode
    if rc != 0:
        raise SystemExit(f"engine-direct run failed ({rc}); see {log}")
    fields = set(Cell.__dataclass_fields__)
    cells = [Cell(**{k: v for k, v in d.items() if k in fields}) for d in json.loads(out.read_text())]
    out.unlink()
    for cell in cells:
        print(markdown_table([cell]).splitlines()[-1], flush=True)
    return cells


def _value(cell: Cell, metric: str) -> float | None:
    v = getattr(cell, metric)
    return float(v) if v is not None else None


def ratio_rows(runs: Sequence[Sequence[Cell]], *, base: str = "gramserve",
               others: Sequence[str] = ("vllm", "engine")) -> list[dict[str, Any]]:
    """Per cell (workload, concurrency, max_tokens) and metric: the ratio base/other in each repeat,
    paired within the repeat (``runs[i]`` holds repeat i's cells of every target); median, min, max.
    Cells with failed requests are left out (their figures would mislead)."""
    keyed: dict[tuple[str, int, int], dict[str, list[Cell | None]]] = {}
    for i, cells in enumerate(runs):
        for c in cells:
            slot = keyed.setdefault((c.workload, c.concurrency, c.max_tokens), {})
            slot.setdefault(c.target, [None] * len(runs))[i] = c
    rows = []
    for (workload, conc, n), by_target in keyed.items():
        row: dict[str, Any] = {"workload": workload, "concurrency": conc, "max_tokens": n}
        for other in others:
            for metric, _ in METRICS:
                ratios = []
                for b, o in zip(by_target.get(base, []), by_target.get(other, [])):
                    if b is None or o is None or b.errors or o.errors:  # a failed cell is no measurement
                        continue
                    bv, ov = _value(b, metric), _value(o, metric)
                    if bv is not None and ov:
                        ratios.append(bv / ov)
                row[f"{metric}/{other}"] = (statistics.median(ratios), min(ratios), max(ratios)) if ratios else None
        rows.append(row)
    return rows


def _r(x: tuple[float, float, float] | None) -> str:
    if x is None:
        return "-"
    med, lo, hi = x
    return f"{med:.2f}" if lo == hi else f"{med:.2f} ({lo:.2f}-{hi:.2f})"


def ratio_table(rows: Sequence[dict[str, Any]], others: Sequence[str] = ("vllm", "engine")) -> str:
    """Markdown: per cell the gramserve/other ratios (median of repeats, min-max in brackets).
    Throughput above 1 is better for gramserve; TTFT and CPU below 1 are better."""
    cols = [(f"{m}/{o}", f"{label} vs {o}") for o in others for m, label in METRICS]
    head = "| workload | conc | max_tokens | " + " | ".join(label for _, label in cols) + " |"
    lines = [head, "|" + "---|" * (3 + len(cols))]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['concurrency']} | {r['max_tokens']} | "
                     + " | ".join(_r(r.get(k)) for k, _ in cols) + " |")
    return "\n".join(lines)


def plot_ratios(rows: Sequence[dict[str, Any]], path: str, *, title: str = "gramserve / other",
                others: Sequence[str] = ("vllm", "engine")) -> None:
    """One panel per metric; per cell a bar per comparison (median, min-max whiskers); 1.0 = parity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['workload']}\nc{r['concurrency']} n{r['max_tokens']}" for r in rows]
    fig, axes = plt.subplots(len(METRICS), 1, figsize=(max(8, 0.9 * len(rows) + 2), 3.2 * len(METRICS)),
                             sharex=True)
    width = 0.8 / len(others)
    for ax, (metric, label) in zip(axes, METRICS):
        for j, other in enumerate(others):
            vals = [r.get(f"{metric}/{other}") for r in rows]
            xs = [i + (j - (len(others) - 1) / 2) * width for i in range(len(rows))]
            med = [v[0] if v else 0 for v in vals]
            err = [[v[0] - v[1] if v else 0 for v in vals], [v[2] - v[0] if v else 0 for v in vals]]
            ax.bar(xs, med, width, yerr=err, capsize=2, label=f"gramserve / {'vLLM server' if other == 'vllm' else other}")
        ax.axhline(1.0, color="black", linewidth=0.8)
        better = "higher is better" if metric in HIGHER_IS_BETTER else "lower is better"
        ax.set_ylabel(f"{label}\n({better})")
        ax.legend(fontsize=8)
    axes[-1].set_xticks(range(len(rows)))
    axes[-1].set_xticklabels(labels, fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _git_head() -> str:
    """The commit measured (servers run the working tree; ``+dirty`` when it had changes)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="concurrency 1,8 and 64 tokens (a few minutes)")
    ap.add_argument("--targets", default=",".join(TARGETS),
                    help="comma-separated, from gramserve,vllm,engine, transport (bench/transport_floor.py: the least "
                         "an HTTP front end pays) and gramserve@REF (gramserve at an earlier commit, from a worktree "
                         "under /tmp: before/after a change, e.g. gramserve,gramserve@HEAD~3); a target ending in /N "
                         "runs N API processes (gramserve,gramserve/2,vllm,vllm/2), overriding --api-server-count")
    ap.add_argument("--workloads", default="plain,json_schema,tools,agent")
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--max-tokens", "--lengths", dest="lengths", default="128",
                    help="comma-separated output lengths (each a cell)")
    ap.add_argument("--requests", type=int, default=None, help="requests per cell (default max(4, 2 x conc))")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--interleave", action="store_true",
                    help="run gramserve and vLLM's server side by side and alternate them cell by cell "
                         "(fairer on a shared machine; needs memory for both)")
    ap.add_argument("--no-settle", dest="settle", action="store_false",
                    help="start each interleaved cell at once (default: when every server has gone quiet; see settle)")
    ap.add_argument("--model", default="smollm2", choices=MODELS,
                    help="standin: a 1-layer random Llama with SmolLM2's tokenizer (bench/standin.py), the same "
                         "real engine at thousands of tok/s, so the front end is the ceiling as on a GPU")
    ap.add_argument("--api-server-count", type=int, default=1,
                    help="API processes per server, on gramserve and vLLM's server alike (API CPU: all of them)")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="let every process run on every CPU (default: the engine's processes on the lower half of "
                         "the CPUs, the API processes and this load client on the rest, as on a GPU node where the "
                         "engine has its own cores; see bench._proc.CpuSplit)")
    ap.add_argument("--port", type=int, default=8611)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--kv-cache-space", type=float, default=2.0, help="GiB (VLLM_CPU_KVCACHE_SPACE)")
    ap.add_argument("--max-num-seqs", type=int, default=None)
    ap.add_argument("--dtype", default=None, choices=("bfloat16", "float32"),
                    help="weights dtype on every target (default: bfloat16 on a CPU with AVX512-BF16 or AMX, "
                         "float32 otherwise; see default_dtype)")
    ap.add_argument("--stream-interval", type=int, default=1, help="tokens per streamed update, on every target")
    ap.add_argument("--logs", default="/tmp/gramserve-bench", help="folder for the servers' logs")
    ap.add_argument("--json", default=None, help="write all cells and ratios here")
    ap.add_argument("--plot", default=None, help="draw the ratios into this PNG")
    return ap


def split_target(target: str) -> tuple[str, int | None]:
    """``vllm/2`` -> (``vllm``, 2): a target with its own ``--api-server-count``; (target, None) without one."""
    name, sep, count = target.rpartition("/")
    if sep and count.isdigit() and int(count) >= 1:
        return name, int(count)
    return target, None


def _server_cmd(target: str, port: int, flags: EngineFlags, model: Path) -> list[str]:
    target, count = split_target(target)
    if count is not None:  # this target's own API process count, the rest of the settings shared
        flags = copy.copy(flags)
        flags.api_server_count = count
    if target.startswith("gramserve@"):  # an earlier gramserve, from its worktree (see _server_cwd)
        runner = _server_cwd(target) / "server" / "runner.py"
        if runner.is_file() and "event_loop_factory" not in runner.read_text():
            print(f"# note: {target} predates --event-loop: it runs asyncio's loop where this tree runs "
                  "uvloop (auto), so the A/B also compares the loops", flush=True)
        return [str(PY), "-m", "server", "serve", "--port", str(port), *flags.gramserve_args()]
    if target == "transport":  # the HTTP floor: a bare uvicorn app on the same engine, no parsing
        if flags.api_server_count > 1:
            raise SystemExit("the transport target runs one API process; leave it out of runs with --api-server-count > 1")
        return [str(PY), "-m", "bench.transport_floor", "--port", str(port), "--", *flags.gramserve_args()]
    return gramserve_cmd(port, flags) if target == "gramserve" else vllm_cmd(port, flags, model)


def _server_cwd(target: str) -> Path:
    target = split_target(target)[0]
    return checkout(target.split("@", 1)[1]) if target.startswith("gramserve@") else REPO


def _others(targets: Sequence[str]) -> list[str]:
    """What gramserve is compared with, in the order given (vllm, engine, gramserve@REF)."""
    return [t for t in targets if t != "gramserve"]


def _interleaved_runs(a: argparse.Namespace, targets: Sequence[str], flags: EngineFlags, model: Path, logs: Path,
                      t0: float) -> list[list[Cell]]:
    """Both servers up at once (ports --port, --port+1), each cell run on one then the other; engine-direct
    (its own process) after each repeat's server cells, with the servers idle."""
    http = [t for t in targets if t != "engine"]
    servers: dict[str, _Server] = {}
    runs = []
    try:
        for j, target in enumerate(http):
            print(f"# starting {target} ({time.monotonic() - t0:.0f} s)", flush=True)
            servers[target] = _Server(_server_cmd(target, a.port + j, flags, model), flags.env(), a.port + j,
                                      logs / f"{target.replace('/', '-x')}-interleaved.log", cwd=_server_cwd(target),
                                      split=flags.split)
        for rep in range(a.repeats):
            print(f"# repeat {rep + 1}/{a.repeats}: {', '.join(http)} interleaved ({time.monotonic() - t0:.0f} s)",
                  flush=True)
            cells = asyncio.run(_interleaved_cells(servers, a, rep))
            if "engine" in targets:
                cells += _engine_cells(a, flags, logs / f"engine-{rep}.log")
            runs.append(cells)
    finally:
        for server in servers.values():
            server.stop()
    return runs


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    if a.quick:
        a.concurrency, a.lengths = "1,8", "64"
    a.workloads = a.workloads.split(",")
    a.concurrency, a.lengths = _ints(a.concurrency), _ints(a.lengths)
    targets = a.targets.split(",")
    model = model_dir(a.model)
    split = cpu_split() if a.pin else None
    if split is not None:  # this load client (and the servers until they are up) on the front end's CPUs
        os.sched_setaffinity(0, split.front)
    flags = EngineFlags(max_model_len=a.max_model_len, kv_cache_gib=a.kv_cache_space, max_num_seqs=a.max_num_seqs,
                        stream_interval=a.stream_interval, model=model if a.model != "smollm2" else None,
                        api_server_count=a.api_server_count, split=split, dtype=a.dtype or default_dtype())
    logs = Path(a.logs)
    logs.mkdir(parents=True, exist_ok=True)
    runs: list[list[Cell]] = []
    t0 = time.monotonic()
    pinned = f"API + client on CPUs {sorted(split.front)}, engine on {sorted(split.engine)}" if split else "unpinned"
    print(f"# measuring {_git_head()} on {a.model} ({model}, {flags.dtype}); {pinned}", flush=True)
    if a.interleave:
        runs = _interleaved_runs(a, targets, flags, model, logs, t0)
    else:
        for rep in range(a.repeats):
            cells: list[Cell] = []
            for target in targets:
                print(f"# repeat {rep + 1}/{a.repeats}: {target} ({time.monotonic() - t0:.0f} s)", flush=True)
                log = logs / f"{target.replace('/', '-x')}-{rep}.log"
                if target == "engine":
                    cells += _engine_cells(a, flags, log)
                    continue
                server = _Server(_server_cmd(target, a.port, flags, model), flags.env(), a.port, log,
                                 cwd=_server_cwd(target), split=flags.split)
                try:
                    cells += asyncio.run(_http_cells(target, server, a))
                finally:
                    server.stop()
            runs.append(cells)
    all_cells = [c for cells in runs for c in cells]
    print("\n## Cells\n\n" + markdown_table(all_cells))
    if 1 in a.concurrency and len(a.concurrency) > 1:
        print("\n## Capacity: the highest concurrency holding ITL p99 under 2x its c1 value\n\n"
              + capacity_table(all_cells))
    others = _others(targets)
    rows = ratio_rows(runs, others=others) if "gramserve" in targets else []
    if rows:
        print(f"\n## Ratios gramserve / other ({a.repeats} repeat(s): median (min-max))\n\n" + ratio_table(rows, others))
    if a.json:
        Path(a.json).write_text(json.dumps({"args": {k: v for k, v in vars(a).items()}, "git": _git_head(),
                                            "cells": [[c.as_dict() for c in cells] for cells in runs],
                                            "ratios": rows}, indent=1))
    if a.plot and rows:
        plot_ratios(rows, a.plot, others=others)
    print(f"\n(total {time.monotonic() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
