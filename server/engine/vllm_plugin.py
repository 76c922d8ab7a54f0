"""A vLLM general plugin: grammar compiles in the engine run at low CPU priority, and the
XGrammar backend also runs llguidance for the schemas marked for it (``hybrid_backend``).

vLLM compiles a request's grammar on a worker thread of the engine-core process, and
xgrammar fans each compile out over 8 fresh threads. On a small CPU machine those threads
take the cores from the model's forward pass, so one unseen tool schema held up every other
stream's tokens for seconds (measured by ``bench/hol_blocking.py``). Lowering the compile
thread's priority (the threads xgrammar spawns inherit it) lets running streams keep their
cores; the compile itself still gets every idle cycle.

Registered under the ``vllm.general_plugins`` entry point (pyproject.toml); vLLM loads it in
each of its processes. It acts only where gramserve's runner set ``GRAMSERVE_ENGINE_PLUGIN``,
so other vLLM programs in the same environment are untouched.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.structured_output.backend_types import StructuredOutputGrammar

__all__ = ["COMPILE_NICE", "ENV_FLAG", "lower_thread_priority", "register"]

log = logging.getLogger("gramserve.engine")

COMPILE_NICE = 10  # added to the thread's nice value: below serving work, above idle
ENV_FLAG = "GRAMSERVE_ENGINE_PLUGIN"


def lower_thread_priority(increment: int = COMPILE_NICE) -> None:
    """Lower the calling thread's CPU priority (Linux: nice is per thread). Never the main thread."""
    if threading.current_thread() is threading.main_thread() or not hasattr(os, "setpriority"):
        return
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        if current < increment:
            os.setpriority(os.PRIO_PROCESS, tid, increment)
    except OSError:  # not permitted or not Linux: compile at normal priority
        pass


def register() -> None:
    """Wrap vLLM's grammar compile so it runs on a low-priority thread, and make its XGrammar
    backend the hybrid one (idempotent)."""
    if os.environ.get(ENV_FLAG) != "1":
        return
    try:
        import vllm.v1.structured_output as so
        from vllm.v1.structured_output import StructuredOutputManager
    except ImportError:  # pragma: no cover - another vLLM layout: leave it alone
        return
    from server.engine.hybrid_backend import hybrid_backend_class

    # The manager builds ``XgrammarBackend(...)`` by this module-level name; a schema marked
    # for llguidance fails closed (XGrammar cannot parse its grammar) wherever this is absent.
    so.XgrammarBackend = hybrid_backend_class()
    original = StructuredOutputManager._create_grammar
    if getattr(original, "_gramserve_low_priority", False):
        return

    def _create_grammar(self: StructuredOutputManager, request: Request) -> StructuredOutputGrammar:
        lower_thread_priority()
        return original(self, request)

    _create_grammar._gramserve_low_priority = True  # type: ignore[attr-defined]
    StructuredOutputManager._create_grammar = _create_grammar
