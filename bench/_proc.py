"""CPU seconds of a process and of its descendants, read from ``/proc`` (Linux).

A server's cost is split in two: its own process (the API front end: HTTP, rendering,
parsing, SSE) and its children (vLLM's engine core and workers). ``cutime``/``cstime``
only count children that have exited and been waited for, so live descendants are found
by walking ``/proc/*/stat`` parent links and summed one by one.
"""
from __future__ import annotations

import os
import random
import socket
from dataclasses import dataclass
from pathlib import Path

__all__ = ["API_PROCESS_NAMES", "ProcStat", "CpuSample", "parse_stat", "read_stat", "descendants", "cpu_sample", "listening_pid",
           "CpuSplit", "cpu_split", "parse_cpus", "pin_tree", "ephemeral_low", "free_port"]

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROC = Path("/proc")


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    ppid: int
    utime: int  # clock ticks
    stime: int

    @property
    def cpu_seconds(self) -> float:
        return (self.utime + self.stime) / CLK_TCK

    @property
    def system_seconds(self) -> float:
        """Kernel time alone (for a server: mostly its socket writes and polls)."""
        return self.stime / CLK_TCK


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds so far of one process (``own``) and of its live descendants (``children``),
    per descendant pid so that a child born or gone between two samples is not miscounted."""
    own: float
    children: dict[int, float]
    own_system: float = 0.0  # the part of ``own`` spent in the kernel

    def system_since(self, earlier: "CpuSample") -> float:
        """Kernel CPU seconds of the process itself since ``earlier``."""
        return self.own_system - earlier.own_system

    def minus(self, earlier: "CpuSample") -> tuple[float, float]:
        """(own, children) CPU seconds spent since ``earlier``; a child new since then counts whole."""
        kids = sum(v - earlier.children.get(pid, 0.0) for pid, v in self.children.items())
        return self.own - earlier.own, kids


def parse_stat(text: str) -> ProcStat:
    """One ``/proc/<pid>/stat`` line. The command name may hold spaces and parentheses, so
    the fields are split after its *last* closing parenthesis."""
    head, _, tail = text.rpartition(")")
    pid_s, _, comm = head.partition(" (")
    fields = tail.split()
    # after comm: state(0) ppid(1) ... utime(11) stime(12) (fields 14 and 15 of proc(5))
    return ProcStat(pid=int(pid_s), comm=comm, ppid=int(fields[1]), utime=int(fields[11]), stime=int(fields[12]))


def read_stat(pid: int, proc: Path = PROC) -> ProcStat | None:
    try:
        return parse_stat((proc / str(pid) / "stat").read_text())
    except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError, IndexError):
        return None  # gone between listing and reading


def _all_stats(proc: Path) -> list[ProcStat]:
    out = []
    for entry in proc.iterdir():
        if entry.name.isdigit():
            st = read_stat(int(entry.name), proc)
            if st is not None:
                out.append(st)
    return out


def descendants(pid: int, stats: list[ProcStat]) -> list[ProcStat]:
    """Every process below ``pid`` in the parent tree (children, grandchildren, ...)."""
    by_parent: dict[int, list[ProcStat]] = {}
    for st in stats:
        by_parent.setdefault(st.ppid, []).append(st)
    found, todo = [], [pid]
    while todo:
        for child in by_parent.get(todo.pop(), ()):
            found.append(child)
            todo.append(child.pid)
    return found


# process names (comm, 15 characters) of the API processes of a server run with --api-server-count > 1:
# gramserve's and vLLM's; their CPU is the front end's, not the engine's
API_PROCESS_NAMES = ("VLLM::gramserve", "VLLM::APIServer")


def cpu_sample(pid: int, proc: Path = PROC) -> CpuSample:
    """CPU seconds of ``pid`` itself (with its API processes, when it has several) and of each other
    live descendant, now."""
    stats = _all_stats(proc)
    own = next((s for s in stats if s.pid == pid), None)
    if own is None:
        raise ProcessLookupError(f"no process {pid}: pass the server's pid with --server-pid")
    below = descendants(pid, stats)
    api = [s for s in below if s.comm.startswith(API_PROCESS_NAMES)]
    return CpuSample(own=own.cpu_seconds + sum(s.cpu_seconds for s in api),
                     children={s.pid: s.cpu_seconds for s in below if s not in api},
                     own_system=own.system_seconds + sum(s.system_seconds for s in api))


def listening_pid(port: int) -> int | None:
    """The process listening on TCP ``port`` on this machine (psutil), or None."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with vLLM
        return None
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:  # pragma: no cover
        return None
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            return int(c.pid)
    return None


@dataclass(frozen=True)
class CpuSplit:
    """Which CPUs the front end (API processes and the load client) and the engine (vLLM's engine core
    and workers) may run on, so that neither takes the other's cores.

    On a GPU node the engine core and the GPU workers run on cores of their own, and an API process
    has a core to itself. On a small CPU machine, unpinned, the engine core's busy poll (vLLM's shared
    memory queue spins with ``sched_yield`` while the worker computes) and the worker's forward pass
    take both cores; the API process then gets a sliver of CPU, requests wait seconds to be admitted,
    the engine steps with a handful of sequences, and every per-token figure measures that contention
    (2-core runs: 527 tok/s and 0.22 s API CPU per 1k tokens unpinned, 6,100 tok/s and 0.047 s pinned,
    the same server and cell)."""

    front: frozenset[int]
    engine: frozenset[int]

    def omp_bind(self) -> str:
        """``VLLM_CPU_OMP_THREADS_BIND``: the CPU worker's OpenMP threads on the engine's CPUs."""
        return ",".join(map(str, sorted(self.engine)))

    def spec(self) -> str:
        """``FRONT:ENGINE`` as :func:`parse_cpus` reads it (to hand the split to another process)."""
        return ",".join(map(str, sorted(self.front))) + ":" + self.omp_bind()


def cpu_split(cpus: set[int] | None = None) -> CpuSplit | None:
    """The lower half of this process's CPUs (at least one) for the engine, the rest for the front end;
    None with fewer than two CPUs (nothing to split)."""
    allowed = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None
    k = max(1, len(allowed) // 2)
    return CpuSplit(front=frozenset(allowed[k:]), engine=frozenset(allowed[:k]))


def parse_cpus(spec: str) -> CpuSplit:
    """``FRONT:ENGINE``, each a comma list of CPU ids or ranges (``1:0``, ``4-7:0-3``)."""
    def ids(part: str) -> frozenset[int]:
        out: set[int] = set()
        for item in part.split(","):
            lo, _, hi = item.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
        return frozenset(out)

    front, sep, engine = spec.partition(":")
    if not sep or not front or not engine:
        raise ValueError(f"CPU split {spec!r}: expected FRONT:ENGINE, e.g. 1:0")
    return CpuSplit(front=ids(front), engine=ids(engine))


def _pin_process(pid: int, cpus: frozenset[int], proc: Path) -> int:
    """Every thread of ``pid`` onto ``cpus``; returns how many threads were moved."""
    moved = 0
    try:
        tids = [int(t.name) for t in (proc / str(pid) / "task").iterdir()]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
            moved += 1
        except (ProcessLookupError, PermissionError, OSError):
            pass  # a thread that ended meanwhile
    return moved


def pin_tree(pid: int, split: CpuSplit, proc: Path = PROC) -> tuple[int, int]:
    """Pin a server's processes: ``pid`` and its API processes (``API_PROCESS_NAMES``) on the front-end
    CPUs, every other descendant (engine core, workers, helpers) on the engine's, each thread of each.
    Threads started later inherit their creator's CPUs. Returns (front, engine) threads moved."""
    below = descendants(pid, _all_stats(proc))
    api = [pid] + [s.pid for s in below if s.comm.startswith(API_PROCESS_NAMES)]
    front = sum(_pin_process(p, split.front, proc) for p in api)
    engine = sum(_pin_process(s.pid, split.engine, proc) for s in below if s.pid not in api)
    return front, engine


def ephemeral_low(proc: Path = PROC) -> int:
    """Where the range of ports the machine hands out for its own sockets begins."""
    try:
        return int((proc / "sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default range starts here


def free_port() -> int:
    """A port free now, below the ephemeral range, for a server started next. A server binds its port
    only once its engine is up (about a minute), and meanwhile the machine hands out ephemeral ports:
    vLLM's own sockets, and a readiness probe's connections to that very port (a connection to a port
    nobody listens on yet can be given it as its own source port, and connect to itself). An
    ephemeral port picked by ``bind(0)`` was taken that way once ("address already in use"); one
    below the range cannot be."""
    low = ephemeral_low()
    if low > 21000:
        for _ in range(200):
            port = random.randint(20000, low - 1)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:  # (a machine whose ephemeral range starts low: the old way)
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
