"""server/engine/vllm_plugin.py: grammar compiles run on low-priority threads."""
from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from server.engine import vllm_plugin


def _nice_in_thread(fn: Any) -> int:
    out: dict[str, int] = {}

    def run() -> None:
        fn()
        out["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out["nice"]


def test_lower_thread_priority_on_worker_threads_only() -> None:
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert _nice_in_thread(vllm_plugin.lower_thread_priority) == max(base, vllm_plugin.COMPILE_NICE)
    vllm_plugin.lower_thread_priority()  # the main thread keeps its priority
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base


def test_register_wraps_vllms_compile_once(monkeypatch: pytest.MonkeyPatch) -> None:
    som = pytest.importorskip("vllm.v1.structured_output")
    calls: list[Any] = []

    def fake_create(self: Any, request: Any) -> str:
        calls.append(request)
        return "grammar"

    monkeypatch.setattr(som.StructuredOutputManager, "_create_grammar", fake_create)
    monkeypatch.delenv(vllm_plugin.ENV_FLAG, raising=False)
    vllm_plugin.register()
    assert som.StructuredOutputManager._create_grammar is fake_create  # off unless gramserve asked
    monkeypatch.setenv(vllm_plugin.ENV_FLAG, "1")
    vllm_plugin.register()
    vllm_plugin.register()  # idempotent: vLLM loads plugins in every process, maybe twice
    wrapped = som.StructuredOutputManager._create_grammar
    assert wrapped is not fake_create and getattr(wrapped, "_gramserve_low_priority", False)
    nice = _nice_in_thread(lambda: wrapped(None, "req"))
    assert calls == ["req"] and nice >= vllm_plugin.COMPILE_NICE
