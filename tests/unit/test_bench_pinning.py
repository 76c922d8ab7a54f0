"""bench.compare's CPU split: the engine's processes on some CPUs, the API processes and the client on the rest."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench._proc import CpuSplit, cpu_split, parse_cpus, pin_tree
from bench.compare import EngineFlags


def test_the_engine_gets_the_lower_half_and_at_least_one_cpu() -> None:
    assert cpu_split({0, 1}) == CpuSplit(front=frozenset({1}), engine=frozenset({0}))
    assert cpu_split(set(range(8))) == CpuSplit(front=frozenset({4, 5, 6, 7}), engine=frozenset({0, 1, 2, 3}))
    assert cpu_split({2, 5, 9}) == CpuSplit(front=frozenset({5, 9}), engine=frozenset({2}))
    assert cpu_split({3}) is None  # one CPU: nothing to split


def test_a_split_travels_as_text() -> None:
    split = parse_cpus("4-7:0-2,9")
    assert split == CpuSplit(front=frozenset({4, 5, 6, 7}), engine=frozenset({0, 1, 2, 9}))
    assert parse_cpus(split.spec()) == split
    assert split.omp_bind() == "0,1,2,9"
    for bad in ("1", ":0", "1:", "a:0"):
        with pytest.raises(ValueError):
            parse_cpus(bad)


def test_the_engine_workers_bind_their_threads_inside_the_engine_cpus() -> None:
    split = CpuSplit(front=frozenset({1}), engine=frozenset({0}))
    env = EngineFlags(max_model_len=2048, kv_cache_gib=1, max_num_seqs=None, split=split).env()
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    plain = EngineFlags(max_model_len=2048, kv_cache_gib=1, max_num_seqs=None).env()
    assert plain.get("VLLM_CPU_OMP_THREADS_BIND") == os.environ.get("VLLM_CPU_OMP_THREADS_BIND")


# A parent that starts an "API process" (named as gramserve names them) and an "engine" child, then waits.
_TREE = r"""
import subprocess, sys, time
api = subprocess.Popen([sys.executable, "-c",
    "open('/proc/self/comm', 'w').write('VLLM::gramserve'); import time; time.sleep(60)"])
engine = subprocess.Popen([sys.executable, "-c",
    "import threading, time; threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); time.sleep(60)"])
print(api.pid, engine.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs to tell the halves apart")
def test_pin_tree_puts_api_processes_on_the_front_and_the_rest_on_the_engine() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    split = CpuSplit(front=frozenset({cpus[1]}), engine=frozenset({cpus[0]}))
    parent = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        api_pid, engine_pid = map(int, parent.stdout.readline().split())
        deadline = time.monotonic() + 10
        while Path(f"/proc/{api_pid}/comm").read_text().strip() != "VLLM::gramserve":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        while len(list(Path(f"/proc/{engine_pid}/task").iterdir())) < 2:  # its second thread is up
            assert time.monotonic() < deadline
            time.sleep(0.05)
        front, engine = pin_tree(parent.pid, split)
        assert front >= 2 and engine >= 2  # every thread, not only each process's main one
        for pid, want in ((parent.pid, split.front), (api_pid, split.front), (engine_pid, split.engine)):
            for task in Path(f"/proc/{pid}/task").iterdir():
                assert os.sched_getaffinity(int(task.name)) == want, (pid, task.name)
    finally:
        subprocess.run(["pkill", "-P", str(parent.pid)], check=False)  # its children first, while they are its
        parent.kill()
        parent.wait()
