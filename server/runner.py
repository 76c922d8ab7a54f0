"""Process lifecycle for ``gramserve serve``: build the engine, serve, drain, exit.

On SIGTERM/SIGINT the server stops taking generation requests (503, ``/health``
503), lets in-flight requests finish for up to ``--drain-timeout`` seconds, then
exits 0. Requests still running at that limit are aborted and their clients told so
(an SSE error event and ``[DONE]``, or a 503), and the exit status is 4. If the engine dies,
``/health`` turns 503 at once and the process exits non-zero so the orchestrator restarts it.
A signal that comes while the engine shuts down is logged, and the process exits once the engine
has stopped (never halfway, leaving engine processes behind).
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, TypeVar

import uvicorn

from server.config import Settings, is_cpu_only
from server.engine.vllm_plugin import ENV_FLAG as ENGINE_PLUGIN_FLAG
from server.logs import configure_logging
from server.state import ServerState

if TYPE_CHECKING:  # pragma: no cover - vllm_engine imports vLLM, loaded only when an engine starts
    from starlette.types import ASGIApp

    from server.engine.vllm_engine import EngineOptions

__all__ = ["serve_one_process", "serve_api_process", "engine_options", "build_state", "set_engine_environment",
           "freeze_startup_heap", "signals_wait_for_engine_shutdown", "uvicorn_config", "event_loop_factory",
           "run_on_loop"]

T = TypeVar("T")

log = logging.getLogger("gramserve")

EXIT_ENGINE_DEAD = 3
EXIT_DRAIN_CUT = 4  # SIGTERM's drain limit passed with requests unfinished
CUT_GRACE_S = 5.0  # after aborting, time for the cut responses to reach their clients


def set_engine_environment(settings: Settings) -> None:
    """The engine's environment variables that follow from ``settings`` (vLLM reads them, not options)."""
    os.environ["VLLM_XGRAMMAR_CACHE_MB"] = str(settings.grammar_cache_mb)  # the engine's own cache
    os.environ.setdefault(ENGINE_PLUGIN_FLAG, "1")  # grammar compiles in the engine at low CPU priority (0: off)
    if is_cpu_only():
        space = settings.kv_cache_space_gib or float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"))
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(space) if float(space).is_integer() else space)


def engine_options(settings: Settings) -> EngineOptions:
    """The engine's options for these settings, with this platform's defaults where the user gave
    none (the embedded model when no --model): one place, for this process's engine and for the
    engine core several API processes share. Sets the engine's environment too."""
    from server.engine.vllm_engine import EngineOptions

    set_engine_environment(settings)
    cpu = is_cpu_only()
    model = settings.model
    if model is None:
        from server.default_model import ensure_default_model

        model = str(ensure_default_model())
    max_model_len = settings.max_model_len or (4096 if cpu else None)
    return EngineOptions(
        model=model,
        served_model_name=settings.model_name,
        max_model_len=max_model_len,
        # CPU: float32. bf16 kernels (AMX, AVX512-BF16) move logprobs by up to ~0.4 nat, enough to
        # flip near-tied greedy tokens, so the answer depended on the CPU; float32 matches the
        # reference exactly at ~0.6-0.7x the speed (README, "CPU dtype"; bench/dtype.py).
        dtype=settings.dtype if settings.dtype != "auto" or not cpu else "float32",
        tensor_parallel_size=settings.tensor_parallel_size,
        pipeline_parallel_size=settings.pipeline_parallel_size,
        distributed_executor_backend=settings.distributed_executor_backend,
        gpu_memory_utilization=settings.gpu_memory_utilization or (0.1 if cpu else 0.9),
        enforce_eager=settings.enforce_eager if settings.enforce_eager is not None else cpu,
        seed=settings.seed,
        max_num_seqs=settings.max_num_seqs,
        stream_interval=settings.stream_interval,
        trust_remote_code=settings.trust_remote_code,
        # CPU: a prompt prefilled in chunks discards the partial step's sample, and vLLM then rewinds
        # the request's seeded generator, which torch's CPU generator cannot do ("CPU Generator does
        # not use offset"): the engine dies. Whole prompts only; every prompt fits one step.
        enable_chunked_prefill=False if cpu else None,
        max_num_batched_tokens=max(max_model_len or 0, 2048) if cpu else None,  # an int on CPU
        break_loops=settings.loop_breaker,
        engine_args=settings.engine_args,
    )


def build_state(settings: Settings, *, engine_client: dict[str, object] | None = None) -> ServerState:
    """``engine_client``: this process is one of several API processes (server/api_servers.py)."""
    from chat_templates import BUILTIN_TEMPLATES
    from server.chat.prompt_tokens import guard_for
    from server.chat.render import ChatRenderer
    from server.engine.vllm_engine import VllmEngine
    from server.structured.grammar_cache import GrammarCache, tokenizer_info_from_hf
    from tool_parsers import resolve_parsers, unrecognised_template

    options = engine_options(settings)
    model = options.model
    default_template = "hermes" if settings.model is None else None
    t0 = time.perf_counter()
    engine = VllmEngine(options, client=engine_client)
    log.info("engine ready", extra={"seconds": round(time.perf_counter() - t0, 1), "model": model})
    renderer = ChatRenderer.from_model(
        model_dir_or_tokenizer=model if Path(model).exists() else engine.tokenizer,
        chat_template=settings.chat_template,
        default=default_template,
    )
    _ = guard_for(engine.tokenizer).encode  # built now (~0.2 s), not in the first request's time to first token
    parsers = resolve_parsers(settings.tool_call_parser, settings.reasoning_parser,
                              template_name=renderer.template_name, template_source=renderer.template_source,
                              builtin_names=tuple(BUILTIN_TEMPLATES))
    renderer = renderer.for_family(parsers.family)  # the renderer reads the same family (call ids)
    log.info("model family: " + parsers.describe(), extra={"family": getattr(parsers.family, "name", None)})
    if parsers.family is None and settings.tool_call_parser == "auto" and renderer.supports_tools:
        log.warning(unrecognised_template(renderer.template_name))
    cache = GrammarCache(tokenizer_info_from_hf(engine.tokenizer, vocab_size=engine.vocab_size),
                         max_entries=settings.grammar_cache_size,
                         compile_timeout_s=settings.grammar_compile_timeout,
                         cache_limit_bytes=settings.grammar_cache_mb * 1024 * 1024,
                         disable_any_whitespace=True)  # as the engine compiles (compact JSON)
    return ServerState(settings=settings, engine=engine, renderer=renderer, grammar_cache=cache,
                       tool_parser=parsers.tool_parser, reasoning_parser=parsers.reasoning)


class _Server(uvicorn.Server):
    """uvicorn server whose exit signal first puts the app into draining mode."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.gs = state

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.gs.draining:
            log.info("draining", extra={"signal": sig, "in_flight": self.gs.in_flight})
        self.gs.draining = True
        asyncio.get_event_loop().call_soon_threadsafe(self._begin_drain)

    def _begin_drain(self) -> None:
        asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        gs = self.gs
        deadline = time.monotonic() + gs.settings.drain_timeout
        while gs.in_flight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if gs.in_flight > 0:
            # Drain limit: abort what still runs; each client gets an error (an SSE error event and
            # [DONE], or a 503) instead of a silently cut connection, and the exit status says so.
            gs.cut = True
            log.warning("drain limit reached; cutting in-flight requests", extra={"in_flight": gs.in_flight})
            for rid in list(gs.running):
                await gs.engine.abort(rid)
            grace = time.monotonic() + CUT_GRACE_S
            while gs.in_flight > 0 and time.monotonic() < grace:
                await asyncio.sleep(0.05)
        self.should_exit = True
        if gs.in_flight > 0:
            self.force_exit = True


async def _watch_engine(state: ServerState, server: _Server) -> None:
    while not server.should_exit:
        await asyncio.sleep(0.5)
        if state.engine_dead or state.engine.is_dead():
            state.engine_dead = True
            log.error("engine died; exiting so the orchestrator restarts this server")
            server.should_exit = True
            server.force_exit = True
            return


async def _serve(settings: Settings, *, sock: socket.socket | None = None,
                 engine_client: dict[str, object] | None = None) -> int:
    """Serve until drained or the engine dies; ``sock`` and ``engine_client``: one of several API
    processes, on the listening socket and engine core they share (server/api_servers.py)."""
    from server.api.app import create_app
    from server.api.http_protocol import EnvelopeHTTPProtocol
    from server.structured.precompile import precompile_file

    state = build_state(settings, engine_client=engine_client)
    if settings.precompile:
        precompile_file(state, Path(settings.precompile))
    from server.metrics import init_labels

    init_labels(tool_parser=getattr(state.tool_parser, "name", None))
    state.ready = True
    app = create_app(state)
    freeze_startup_heap()
    config = uvicorn_config(app, settings, http=EnvelopeHTTPProtocol)
    server = _Server(config, state)
    watcher = asyncio.ensure_future(_watch_engine(state, server))
    log.info("serving", extra={"host": settings.host, "port": settings.port, "model": state.engine.model_name})
    try:
        await server.serve(sockets=[sock] if sock is not None else None)
    finally:
        watcher.cancel()
        with signals_wait_for_engine_shutdown():
            await state.engine.shutdown()
    if state.engine_dead:
        return EXIT_ENGINE_DEAD
    return EXIT_DRAIN_CUT if state.cut else 0


def uvicorn_config(app: ASGIApp, settings: Settings, *, http: type) -> uvicorn.Config:
    """uvicorn's settings for one API process: no lifespan, no access log (the gateway writes its own
    line), a graceful-shutdown limit past the drain, and keep-alive from ``--timeout-keep-alive``."""
    return uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning",
                          timeout_graceful_shutdown=max(1, int(settings.drain_timeout)) + 5,
                          timeout_keep_alive=settings.timeout_keep_alive,
                          lifespan="off", access_log=False, http=http)


@contextlib.contextmanager
def signals_wait_for_engine_shutdown() -> Iterator[None]:
    """SIGTERM / SIGINT noted, not obeyed, while the engine shuts down. uvicorn gives the signals
    back to Python's defaults once it stops serving, so a second SIGTERM (an impatient supervisor,
    a second Ctrl-C) would end this process halfway through the engine's shutdown: an exit of 143
    after a clean drain, and engine processes that may outlive it holding their memory (on a
    GPU, the device memory the restarted server needs). vLLM bounds its own shutdown."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread has handlers
        yield
        return

    def note(sig: int, frame: FrameType | None) -> None:
        log.warning("signal received while the engine shuts down; exiting once it has", extra={"signal": sig})

    kept = {sig: signal.signal(sig, note) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)


def freeze_startup_heap() -> int:
    """Put what startup built (vLLM, torch, transformers, the tokenizer, the app: ~700,000
    objects with the embedded model) out of the garbage collector's reach; return how many. Otherwise the first
    full collection walks all of it on the event loop: ~0.7 s of CPU in the first requests'
    streams, every stream stalled meanwhile, and again at each later full collection. vLLM's
    engine core does the same (its API server does not). Later objects are collected as usual."""
    gc.collect()
    gc.freeze()
    count = gc.get_freeze_count()
    log.info("startup heap frozen", extra={"objects": count})
    return count


def event_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop an API process runs (``--event-loop``): uvloop's (``auto`` where it is installed),
    or asyncio's own (None). uvloop's loop, transports and callbacks are C: 2-12% less API CPU per
    token in paired live runs (docs/performance.md); vLLM's own server runs on it too."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise SystemExit("--event-loop uvloop: uvloop is not installed here; install it (pip install uvloop) "
                             "or pass --event-loop auto or asyncio") from None
        return None
    return uvloop.new_event_loop


def run_on_loop(main: Coroutine[object, object, T], settings: Settings) -> T:
    """``asyncio.run(main)`` on the loop ``settings.event_loop`` chooses (the API processes; the bench's
    transport floor and engine-alone target, so they run the loop gramserve runs)."""
    with asyncio.Runner(loop_factory=event_loop_factory(settings.event_loop)) as runner:
        return runner.run(main)


def serve_one_process(settings: Settings) -> int:
    """The whole server in this process (``--api-server-count 1``; logging configured by the caller)."""
    return run_on_loop(_serve(settings), settings)


def serve_api_process(settings: Settings, sock: socket.socket, engine_client: dict[str, object]) -> int:
    """One of ``--api-server-count`` API processes: this package's whole server on a shared socket."""
    configure_logging()
    return run_on_loop(_serve(settings, sock=sock, engine_client=engine_client), settings)
