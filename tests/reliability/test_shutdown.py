"""A capped server under a mixed load, then SIGTERM while requests still run.

With ``--max-concurrent-requests`` every stream is served or refused with a 429 envelope.
At the drain limit, running streams end with an error event and ``[DONE]``, a running
non-streamed request gets a 503 envelope, and the exit status is 4 (work was cut).
"""
from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

from tests.server_process import API_KEY, ServerProcess

from ._probe import assert_envelope
from ._streams import StreamResult, generating, mixed_bodies, run_many, run_stream

pytestmark = pytest.mark.reliability


def test_capped_load_then_sigterm_cuts_with_errors_and_exit_4() -> None:
    srv = ServerProcess(["--api-key", API_KEY, "--max-model-len", "2048", "--max-concurrent-requests", "16",
                         "--drain-timeout", "3"], log_name="shutdown")
    try:
        srv.wait_ready()
        model = "SmolLM2-135M-Instruct"
        results = run_many(srv.base, mixed_bodies(64, model=model), workers=64)
        served = [r for r in results if r.status == 200]
        refused = [r for r in results if r.status == 429]
        print(f"\n[capped 64 streams] served {len(served)}, 429 {len(refused)}")
        assert len(served) + len(refused) == 64 and served and refused
        assert not [r.problems() for r in results if r.problems()]
        assert all(r.error and r.error["code"] == "too_many_requests" for r in refused)

        long = {"model": model, "stream": True, "max_tokens": 1500, "ignore_eos": True,
                "messages": [{"role": "user", "content": "Write a very long story."}]}
        streams: list[StreamResult] = []
        non_streamed: list[httpx.Response] = []
        failures: list[str] = []  # a client thread's exception, kept for the failure message

        started = [threading.Event() for _ in range(4)]

        def stream(i: int) -> None:
            try:
                streams.append(run_stream(srv.base, "plain", long, timeout=120, started=started[i]))
            except Exception as exc:  # noqa: BLE001 - reported by the assertions below
                failures.append(f"stream {i}: {exc!r}")

        def plain() -> None:
            try:
                with httpx.Client(base_url=srv.base, timeout=120, headers={"Authorization": f"Bearer {API_KEY}"}) as c:
                    non_streamed.append(c.post("/v1/chat/completions", json={**long, "stream": False}))
            except Exception as exc:  # noqa: BLE001 - reported by the assertions below
                failures.append(f"non-streamed: {exc!r}")

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)] + [threading.Thread(target=plain)]
        for t in threads:
            t.start()
        # SIGTERM only once all five are generating: the streams have text, and no request waits
        # for its first token (1500 tokens each take far longer than the 3 s drain limit).
        t0 = time.monotonic()
        readings: list[tuple[float, tuple[float, float], int]] = []  # each change: (s, gauges, streams with text)
        while time.monotonic() < t0 + 120:
            gauges, with_text = generating(srv.base), sum(e.is_set() for e in started)
            if not readings or readings[-1][1:] != (gauges, with_text):
                readings.append((round(time.monotonic() - t0, 1), gauges, with_text))
            if with_text == 4 and gauges == (5, 0):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the five requests never all ran: (s, (running, waiting), streams with text) {readings}; "
                        f"ended streams {[(s.done, s.finish, s.error, len(s.content)) for s in streams]}; "
                        f"non-streamed {[(r.status_code, r.text[:300]) for r in non_streamed]}; "
                        f"client errors {failures}; server log:\n{srv.tail(80)}")
        srv.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(120)
        code = srv.proc.wait(60)
        print(f"[sigterm under load] exit {code}; streams: {[(s.done, (s.error or {}).get('code')) for s in streams]}; "
              f"non-streamed: {[r.status_code for r in non_streamed]}")
        assert not failures, failures
        assert len(streams) == 4 and all(s.done and s.error and s.error["code"] == "server_shutdown" for s in streams)
        assert all(s.content for s in streams), "the streams were cut mid-answer, after some text"
        assert len(non_streamed) == 1
        assert_envelope(non_streamed[0], 503, code="server_shutdown")
        assert code == 4
    finally:
        srv.stop()
