"""A real server process (real vLLM engine, real model, real port) for e2e and reliability tests."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

__all__ = ["API_KEY", "CLIENT_TIMEOUT_S", "ROOT", "TESTDATA", "ServerProcess", "free_port", "serving"]

import httpx

from bench._proc import free_port  # a port below the ephemeral range (the reason is there)
from tests.testdata import testdata_root

ROOT = Path(__file__).resolve().parents[1]
# A request may wait behind a full batch on a slow machine; the server bounds each one with
# max_tokens (and its compile timeout), so the client never gives up first.
CLIENT_TIMEOUT_S = 1800
TESTDATA = testdata_root()
API_KEY = "test-key-1"


class ServerProcess:
    def __init__(self, args: list[str], *, env: dict[str, str] | None = None, log_name: str = "server") -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        logs = Path(os.environ.get("GRAMSERVE_TEST_LOGS", "/tmp"))
        logs.mkdir(parents=True, exist_ok=True)
        self.log_path = logs / f"gramserve-{log_name}-{self.port}.log"
        self._log = open(self.log_path, "wb")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server", "serve", "--port", str(self.port), *args],
            cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        self.ready_seconds: float | None = None

    def wait_ready(self, timeout: float = 600.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; log:\n{self.tail()}")
            try:
                if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                    self.ready_seconds = time.perf_counter() - self.started
                    return self.ready_seconds
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"server not ready after {timeout}s; log:\n{self.tail()}")

    def tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


@contextlib.contextmanager
def serving(extra_args: list[str], *, log_name: str) -> Iterator[ServerProcess]:
    """A ready server with the test API key; on exit SIGTERM must end it with status 0."""
    srv = ServerProcess(["--api-key", API_KEY, "--max-model-len", "2048", *extra_args], log_name=log_name)
    seconds = srv.wait_ready()
    print(f"\n[e2e] {log_name} server ready in {seconds:.1f}s (process start to /health 200)")
    yield srv
    code = srv.stop()
    assert code == 0, f"{log_name} server exited {code} on SIGTERM; log:\n{srv.tail()}"
