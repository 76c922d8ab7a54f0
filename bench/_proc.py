"""CPU seconds of a process and of its descendants, read from ``/proc`` (Linux).

A server's cost is split in two: its own process (the API front end: HTTP, rendering,
parsing, SSE) and its children (vLLM's engine core and workers). ``cutime``/``cstime``
only count children that have exited and been waited for, so live descendants are found
by walking ``/proc/*/stat`` parent links and summed one by one.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["API_PROCESS_NAMES", "ProcStat", "CpuSample", "parse_stat", "read_stat", "descendants", "cpu_sample", "listening_pid"]

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
