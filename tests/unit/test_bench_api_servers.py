"""Benchmarks of servers run with ``--api-server-count`` > 1: the API processes' CPU is the front end's."""
from __future__ import annotations

from pathlib import Path

from bench._proc import cpu_sample
from bench.compare import EngineFlags, gramserve_cmd, vllm_cmd


def _stat(proc: Path, pid: int, comm: str, ppid: int, utime: int, stime: int) -> None:
    fields = ["S", str(ppid)] + ["0"] * 9 + [str(utime), str(stime)] + ["0"] * 10
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) " + " ".join(fields) + "\n")


def test_api_processes_count_as_the_front_end(tmp_path: Path) -> None:
    import os

    tick = os.sysconf("SC_CLK_TCK")
    _stat(tmp_path, 10, "python", 1, tick, 0)  # the parent: launches, then waits
    _stat(tmp_path, 11, "VLLM::gramserve", 10, 5 * tick, tick)  # API process 0
    _stat(tmp_path, 12, "VLLM::APIServer", 10, 3 * tick, 0)  # vLLM's name for one
    _stat(tmp_path, 13, "VLLM::EngineCor", 10, 7 * tick, 0)  # the engine core
    sample = cpu_sample(10, proc=tmp_path)
    assert sample.own == 1 + 5 + 1 + 3 and sample.own_system == 1
    assert sample.children == {13: 7}


def test_the_count_reaches_both_servers() -> None:
    flags = EngineFlags(max_model_len=2048, kv_cache_gib=2, max_num_seqs=None, api_server_count=2)
    g, v = gramserve_cmd(8000, flags), vllm_cmd(8001, flags, model=Path("/m"))
    assert g[g.index("--api-server-count") + 1] == v[v.index("--api-server-count") + 1] == "2"
    assert v[v.index("-m") + 1] == "bench.vllm_server"  # vLLM's api_server entry runs one process
    one = vllm_cmd(8001, EngineFlags(max_model_len=2048, kv_cache_gib=2, max_num_seqs=None), model=Path("/m"))
    assert "--api-server-count" not in one and one[one.index("-m") + 1] == "vllm.entrypoints.openai.api_server"


def test_a_target_may_carry_its_own_count() -> None:
    from bench.compare import _server_cmd, split_target

    assert split_target("vllm/2") == ("vllm", 2) and split_target("gramserve@HEAD~3/2") == ("gramserve@HEAD~3", 2)
    assert split_target("gramserve") == ("gramserve", None) and split_target("vllm/x") == ("vllm/x", None)
    flags = EngineFlags(max_model_len=2048, kv_cache_gib=2, max_num_seqs=None)
    two = _server_cmd("gramserve/2", 8000, flags, Path("/m"))
    assert two[two.index("--api-server-count") + 1] == "2"
    assert "--api-server-count" not in _server_cmd("gramserve", 8000, flags, Path("/m"))  # the shared flags unchanged
    v = _server_cmd("vllm/2", 8001, flags, Path("/m"))
    assert v[v.index("-m") + 1] == "bench.vllm_server" and v[v.index("--api-server-count") + 1] == "2"
