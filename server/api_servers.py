"""``--api-server-count N``: N gramserve API processes on one port, sharing one vLLM engine core.

One Python process running HTTP, SSE, parsing and vLLM's output handling tops out at one core's
worth of tokens per second; a GPU makes more. This runs vLLM's own multi-API-server machinery,
as ``vllm serve --api-server-count`` does (vllm/entrypoints/cli/serve.py run_multi_api_server):
this parent binds the engine's ZMQ sockets for N clients, launches the one engine core
(``launch_core_engines``, with the DP coordinator when vLLM wants one) and starts N API
processes with vLLM's ``APIServerProcessManager``, each running gramserve's whole server
(:func:`server.runner.serve_api_process`) on the shared listening socket, with an ``AsyncLLM``
that is engine client ``i`` of ``N``. Every process has everything a single server has (grammar
cache, Responses store, drain, disconnect aborts, /health); what they share is the socket, the
engine core and, through Prometheus multiprocess mode, one /metrics view.

Per process, not shared: the grammar cache (each compiles a new schema once; the engine core's
own cache is shared) and the Responses store (see README, "Several API processes").

Signals: SIGTERM/SIGINT here is passed to every API process, which drains as a single server
does (``--drain-timeout``); then the engine core stops. An API process that exits (engine death:
exit 3) stops the others and the engine core, and this process exits non-zero.
"""
from __future__ import annotations

import argparse
import logging
import signal
import socket
import tempfile
from types import FrameType

from server.config import Settings

__all__ = ["serve_api_servers", "metrics_dir_env", "EXIT_API_SERVER_FAILED"]

log = logging.getLogger("gramserve")

EXIT_API_SERVER_FAILED = 5  # an API process or the engine core exited unexpectedly
_SHUTDOWN_EXTRA_S = 10.0  # beyond --drain-timeout: the cut responses' grace and the exit itself


def metrics_dir_env() -> str:
    """The environment variable that puts prometheus_client into multiprocess mode."""
    return "PROMETHEUS_MULTIPROC_DIR"


def _prepare_metrics_dir() -> tempfile.TemporaryDirectory:
    """A fresh directory for the API processes' metric files, in the environment before they start
    (prometheus_client reads it at import); one /metrics then merges every process's values."""
    import os

    folder = tempfile.TemporaryDirectory(prefix="gramserve-metrics-")
    os.environ[metrics_dir_env()] = folder.name
    return folder


def _socket(settings: Settings) -> socket.socket:
    from vllm.entrypoints.launchers.launcher import create_server_socket

    sock = create_server_socket((settings.host, settings.port), reuse_port=True)
    sock.set_inheritable(True)
    return sock


def _api_process(listen_address: str, sock: socket.socket, args: argparse.Namespace,
                 client_config: dict[str, object]) -> None:
    """The target of each API process (spawned by vLLM's APIServerProcessManager; ``args.settings``)."""
    import sys

    from vllm.utils.system_utils import set_process_title

    from server.runner import serve_api_process

    set_process_title("gramserve-api", str(client_config.get("client_index", 0)))
    sys.exit(serve_api_process(args.settings, sock, client_config))


def serve_api_servers(settings: Settings) -> int:
    """Run N API processes and the engine core they share until SIGTERM or a failure; the exit status."""
    from vllm.v1.engine.utils import bind_engine_zmq_listeners, launch_core_engines
    from vllm.v1.executor import Executor
    from vllm.v1.utils import APIServerProcessManager, wait_for_completion_or_failure

    from server.engine.vllm_engine import engine_config
    from server.runner import engine_options

    count = settings.api_server_count
    metrics = _prepare_metrics_dir()
    stopping = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            raise SystemExit  # as vLLM's own: unwinds into the shutdown below

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sock = _socket(settings)
    vllm_config = engine_config(engine_options(settings), api_processes=count, api_rank=-1)
    listeners = bind_engine_zmq_listeners(vllm_config, count)
    manager = None
    engines = coordinator = None
    failed = False
    try:
        with launch_core_engines(vllm_config, Executor.get_class(vllm_config), True,
                                 listeners.addresses) as launch:
            engines, coordinator = launch.engine_manager, launch.coordinator
            stats = coordinator.get_stats_publish_address() if coordinator else None
            manager = APIServerProcessManager(
                listen_address=f"http://{settings.host}:{settings.port}", sock=sock,
                args=argparse.Namespace(settings=settings),
                num_servers=count, input_listeners=listeners.inputs, output_listeners=listeners.outputs,
                target_server_fn=_api_process, stats_update_address=stats, tensor_queue=launch.tensor_queue)
            launch.watched_frontend_processes = manager.processes
        log.info("serving", extra={"host": settings.host, "port": settings.port, "api_processes": count})
        wait_for_completion_or_failure(api_server_manager=manager, engine_manager=engines, coordinator=coordinator)
    except SystemExit:
        pass
    except Exception:  # noqa: BLE001 - vLLM raises when a process exits unexpectedly
        log.exception("an API process or the engine core failed; stopping all")
        failed = True
    finally:
        timeout = settings.drain_timeout + _SHUTDOWN_EXTRA_S
        if manager is not None:
            manager.shutdown(timeout=timeout)  # SIGTERM: each drains as a single server does
        if engines is not None:
            engines.shutdown(timeout=_SHUTDOWN_EXTRA_S)
        if coordinator is not None:
            coordinator.shutdown(timeout=_SHUTDOWN_EXTRA_S)
        sock.close()
        metrics.cleanup()
    codes = [p.exitcode for p in (manager.processes if manager else [])]
    if failed or any(code not in (0, None, -signal.SIGTERM) for code in codes):
        return max([c for c in codes if c and c > 0] or [EXIT_API_SERVER_FAILED])
    return 0
