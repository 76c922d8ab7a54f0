"""server/runner.py: what the process does around serving (the rest is in tests/e2e/test_lifecycle.py)."""
from __future__ import annotations

import asyncio
import gc
import sys
import weakref

import pytest

from server.config import settings_from_args
from server.runner import event_loop_factory, freeze_startup_heap, run_on_loop


class _Node:
    pass


def test_startup_heap_is_out_of_the_collectors_reach_and_new_garbage_still_goes() -> None:
    startup = _Node()
    startup.me = startup  # a cycle built at startup: alive, walked by every full collection
    try:
        frozen = freeze_startup_heap()
        # what it returns is the freeze count (frozen objects freed since, e.g. by another thread,
        # lower the count: a full CI run saw 2 fewer; nothing else raises it)
        assert frozen >= 1000 and frozen - 1000 <= gc.get_freeze_count() <= frozen
        assert not any(o is startup for o in gc.get_objects(generation=2))
        later = _Node()
        later.me = later  # a cycle made while serving, then dropped: still collected
        gone = weakref.ref(later)
        del later
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()


def test_a_signal_during_the_engines_shutdown_is_noted_not_obeyed(caplog) -> None:
    """A second SIGTERM while the engine shuts down must not end the process there (exit 143, engine
    processes left behind); the handlers in place before are back afterwards."""
    import os
    import signal

    from server.runner import signals_wait_for_engine_shutdown

    before = signal.getsignal(signal.SIGTERM)
    with signals_wait_for_engine_shutdown():
        os.kill(os.getpid(), signal.SIGTERM)  # the default handler would end the test run here
        os.kill(os.getpid(), signal.SIGINT)  # and this one raise KeyboardInterrupt
    assert signal.getsignal(signal.SIGTERM) is before
    noted = [r for r in caplog.records if "while the engine shuts down" in r.getMessage()]
    assert [r.signal for r in noted] == [signal.SIGTERM, signal.SIGINT]


def test_an_idle_connection_outlives_the_clients_own_idle_limit() -> None:
    """The OpenAI SDK (httpx) drops an idle connection after 5 s, as uvicorn's default does: at equal
    limits a client can send on a connection the server is closing. The server's default is above
    it: a connection left idle 6 s still answers (uvicorn's 5 s default answers nothing)."""
    import asyncio
    import socket
    import threading
    import time

    import httpx
    import uvicorn

    from server.config import Settings
    from server.runner import uvicorn_config

    assert Settings().timeout_keep_alive > httpx.Limits().keepalive_expiry + 10

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn_config(app, Settings(host="127.0.0.1", port=sock.getsockname()[1]), http=uvicorn.Config(app).http)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        def answer(conn: socket.socket) -> bytes:
            """One response: the head and its 2-byte body may come in separate reads; b"" once closed."""
            got = b""
            while not got.endswith(b"ok"):
                more = conn.recv(4096)
                if not more:
                    break
                got += more
            return got

        with socket.create_connection(sock.getsockname(), timeout=5) as conn:
            request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
            conn.sendall(request)
            assert answer(conn).endswith(b"ok")
            time.sleep(6)
            conn.sendall(request)
            assert answer(conn).endswith(b"ok"), "the server closed an idle connection within 6 s"
    finally:
        server.should_exit = True
        thread.join(10)


def _runs_on(choice: str) -> str:
    """The module of the loop ``run_on_loop`` runs a coroutine on, for ``--event-loop choice``."""
    seen: list[str] = []

    async def main() -> int:
        seen.append(type(asyncio.get_running_loop()).__module__)
        return 7

    assert run_on_loop(main(), settings_from_args(["--event-loop", choice])) == 7
    return seen[0]


def test_the_event_loop_is_uvloop_where_installed_unless_asked_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvloop

    assert settings_from_args([]).event_loop == "auto"
    assert event_loop_factory("auto") is uvloop.new_event_loop and event_loop_factory("uvloop") is uvloop.new_event_loop
    assert event_loop_factory("asyncio") is None
    assert _runs_on("auto") == "uvloop" and _runs_on("uvloop") == "uvloop"
    assert _runs_on("asyncio").startswith("asyncio.")
    monkeypatch.setenv("GRAMSERVE_EVENT_LOOP", "asyncio")
    assert settings_from_args([]).event_loop == "asyncio"


def test_without_uvloop_auto_falls_back_and_uvloop_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    assert event_loop_factory("auto") is None
    with pytest.raises(SystemExit, match="--event-loop uvloop: uvloop is not installed.*--event-loop auto or asyncio"):
        event_loop_factory("uvloop")


def test_serve_says_so_before_starting_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    import server.__main__ as cli
    from server import logs, runner

    monkeypatch.setitem(sys.modules, "uvloop", None)
    monkeypatch.setattr(logs, "configure_logging", lambda: None)
    started: list[int] = []
    monkeypatch.setattr(runner, "serve_one_process", lambda settings: started.append(1) or 0)
    with pytest.raises(SystemExit, match="--event-loop uvloop"):
        cli.serve(settings_from_args(["--event-loop", "uvloop"]))
    assert not started
    assert cli.serve(settings_from_args(["--event-loop", "auto"])) == 0 and started == [1]  # (falls back to asyncio)
