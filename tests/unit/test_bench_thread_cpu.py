"""bench/thread_cpu.py: only the counted thread's outermost calls are summed, a re-exported function is
counted wherever it is called from, and the table is what happened between two snapshots."""
from __future__ import annotations

import json
import sys
import threading
import types
from typing import Any

import pytest

from bench import thread_cpu
from bench.thread_cpu import ThreadCpu, table


def _spin(n: int) -> int:
    return sum(i * i for i in range(n))


@pytest.fixture
def fake_modules(monkeypatch: pytest.MonkeyPatch) -> tuple[types.ModuleType, types.ModuleType]:
    home = types.ModuleType("tc_home")

    class Worker:
        def work(self, n: int, depth: int = 0) -> int:
            return _spin(n) + (self.work(n, depth - 1) if depth else 0)

    home.Worker = Worker  # type: ignore[attr-defined]
    home.spin = _spin  # type: ignore[attr-defined]
    again = types.ModuleType("tc_again")
    again.spin = _spin  # type: ignore[attr-defined]  # as ``from tc_home import spin`` leaves it
    monkeypatch.setitem(sys.modules, "tc_home", home)
    monkeypatch.setitem(sys.modules, "tc_again", again)
    return home, again


def test_only_the_counted_threads_outermost_calls(fake_modules: Any) -> None:
    home, again = fake_modules
    tally = ThreadCpu()
    tally.patch(["tc_home:Worker.work", "tc_home:spin", "tc_home:Missing.x", "tc_nowhere:f"])
    assert tally.skipped == ["tc_home:Missing.x", "tc_nowhere:f"]
    home.Worker().work(20000, depth=2)  # three nested calls: one counted
    again.spin(1000)  # the re-export is the counted one too
    other = threading.Thread(target=lambda: home.Worker().work(200000))
    other.start()
    other.join()  # not on the counted thread: not counted
    snap = tally.snapshot()
    assert snap["functions"]["tc_home:Worker.work"]["calls"] == 1
    assert snap["functions"]["tc_home:Worker.work"]["ms"] > 0
    assert snap["functions"]["tc_home:spin"]["calls"] == 1
    assert snap["thread_ms"] >= snap["functions"]["tc_home:Worker.work"]["ms"]
    assert snap["process_ms"] >= snap["thread_ms"] * 0.5  # (different clocks; the process's includes the thread's)


def test_the_table_is_the_difference_of_two_snapshots() -> None:
    before = {"thread_ms": 100.0, "process_ms": 150.0, "functions": {"f": {"ms": 10.0, "calls": 5}}, "skipped": []}
    after = {"thread_ms": 400.0, "process_ms": 480.0,
             "functions": {"f": {"ms": 70.0, "calls": 25}, "g": {"ms": 3.0, "calls": 2}}, "skipped": []}
    other = {"thread_ms": 200.0, "process_ms": 210.0, "functions": {"f": {"ms": 30.0, "calls": 9}}, "skipped": []}
    out = table({"a": (before, after), "b": (before, other)}).splitlines()
    assert out[0] == "| function | a ms (calls) | b ms (calls) |"
    assert "| main thread | 300 | 100 |" in out and "| process | 330 | 60 |" in out
    assert "| f | 60 (20) | 20 (4) |" in out and "| g | 3 (2) | 0 |" in out


def test_the_table_command_reads_named_snapshot_pairs(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    snap = {"thread_ms": 1.0, "process_ms": 2.0, "functions": {}, "skipped": []}
    later = {**snap, "thread_ms": 11.0}
    (tmp_path / "0.json").write_text(json.dumps(snap))
    (tmp_path / "1.json").write_text(json.dumps(later))
    thread_cpu.main(["table", f"x={tmp_path / '0.json'}:{tmp_path / '1.json'}"])
    assert "| main thread | 10 |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        thread_cpu.main(["table", "x=only_one.json"])
