"""``--api-server-count 2``: two API processes on one port and one engine core (server/api_servers.py).

Run on the benchmark stand-in (bench/standin.py: the real vLLM engine, grammars and all, on a
tiny model), so the mode's correctness is checked in seconds: both processes start and serve,
every answer is valid (streams, JSON schema, tool calls), /metrics is one view over both, the
hostile-input table and clients leaving mid-answer are handled alike by both (nothing lost, nothing
left running), and SIGTERM drains and ends every process with 0.
"""
from __future__ import annotations

import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.server_process import API_KEY, ServerProcess

pytestmark = pytest.mark.reliability

MODEL = "SmolLM2-135M-Instruct"
HEADERS = {"Authorization": f"Bearer {API_KEY}"}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["city", "n"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def _session_pids(sid: int) -> list[int]:
    """The processes of the server's session whose command line names a gramserve API process."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[3]) == sid and "gramserve-api" in cmd:
            pids.append(int(entry.name))
    return pids


def _body(i: int) -> dict:
    kind = i % 3
    body: dict = {"model": MODEL, "max_tokens": 96, "messages": [{"role": "user", "content": f"Weather {i}?"}]}
    if kind == 1:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "w", "strict": True,
                                                                          "schema": SCHEMA}}
    elif kind == 2:
        body.update(tools=TOOLS, tool_choice="required")
    return body


def _check(i: int, answer: dict) -> bool:
    """Whether the answer was complete (then checked); one cut by max_tokens is not checked."""
    choice = answer["choices"][0]
    message = choice["message"]
    if choice["finish_reason"] == "length":
        return False
    if i % 3 == 1:
        value = json.loads(message["content"])
        assert set(value) == {"city", "n"} and isinstance(value["n"], int)
    elif i % 3 == 2:
        call = message["tool_calls"][0]["function"]
        assert call["name"] == "get_weather" and "city" in json.loads(call["arguments"])
    return True


def _streamed(base: str, i: int) -> str:
    with httpx.Client(base_url=base, headers=HEADERS, timeout=120) as c:
        with c.stream("POST", "/v1/chat/completions", json={**_body(0), "stream": True}) as r:
            assert r.status_code == 200
            lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]" and all(ln.startswith("data: ") for ln in lines)
    return "".join(json.loads(ln[6:])["choices"][0]["delta"].get("content") or ""
                   for ln in lines[:-1] if json.loads(ln[6:])["choices"])


@pytest.fixture(scope="module")
def server() -> ServerProcess:
    from bench.standin import ensure_standin

    srv = ServerProcess(["--api-key", API_KEY, "--model", str(ensure_standin()), "--served-model-name", MODEL,
                         "--chat-template", "hermes", "--max-model-len", "2048", "--api-server-count", "2",
                         "--drain-timeout", "10"], log_name="api-servers")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def test_two_api_processes_serve_one_engine(server: ServerProcess) -> None:
    assert len(_session_pids(server.proc.pid)) == 2, server.tail()
    with httpx.Client(base_url=server.base, headers=HEADERS, timeout=120) as c:
        assert c.get("/health").status_code == 200
        assert c.get("/v1/models").json()["data"][0]["id"] == MODEL


def test_every_answer_is_valid_from_many_connections(server: ServerProcess) -> None:
    def one(i: int) -> tuple[int, bool]:
        with httpx.Client(base_url=server.base, headers=HEADERS, timeout=120) as c:  # a connection each
            r = c.post("/v1/chat/completions", json=_body(i))
            assert r.status_code == 200, r.text
            return i % 3, _check(i, r.json())

    with ThreadPoolExecutor(16) as pool:
        checked = {kind for kind, complete in pool.map(one, range(48)) if complete}
    assert checked == {0, 1, 2}, "every kind of answer was checked complete at least once"
    with ThreadPoolExecutor(8) as pool:
        assert all(isinstance(text, str) for text in pool.map(lambda i: _streamed(server.base, i), range(16)))


def test_metrics_are_one_view_over_both_processes(server: ServerProcess) -> None:
    def total(text: str) -> float:
        return sum(float(m.group(1)) for m in re.finditer(
            r'^gramserve_requests_total\{endpoint="/v1/chat/completions",status="200"\} (\S+)$', text, re.M))

    with httpx.Client(base_url=server.base, headers=HEADERS, timeout=120) as c:
        before = total(c.get("/metrics").text)

    def one(i: int) -> None:
        with httpx.Client(base_url=server.base, headers=HEADERS, timeout=120) as c:
            assert c.post("/v1/chat/completions", json=_body(i)).status_code == 200

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(one, range(24)))
    for _ in range(4):  # each scrape may land on either process: every one shows all 24
        with httpx.Client(base_url=server.base, headers=HEADERS, timeout=120) as c:
            text = c.get("/metrics").text
        assert total(text) - before == 24
        assert "vllm:" in text


def test_hostile_input_is_answered_alike_by_every_process(server: ServerProcess) -> None:
    """The hostile-input table (test_hostile_table.py) against two API processes: each case, on
    whichever process takes its connection, is the same OpenAI error, and both stay up."""
    from tests.reliability._probe import assert_envelope
    from tests.reliability.test_hostile_table import CASES

    failed = []
    for i, case in enumerate(CASES):
        headers = {"Authorization": f"Bearer {API_KEY}", **case.headers}
        kwargs: dict = {"headers": headers}
        if isinstance(case.body, bytes):
            kwargs["content"] = case.body
            headers["content-type"] = "application/json"
        elif case.body is not None:
            kwargs["json"] = case.body
        with httpx.Client(base_url=server.base, timeout=120) as c:  # a connection each: both processes take some
            r = c.request(case.method, case.path, **kwargs)
        try:
            assert_envelope(r, case.status, param=case.param)
        except AssertionError as exc:
            failed.append(f"{case.name}: {exc}")
        if i % 25 == 24:
            _assert_both_answer(server)
    print(f"\n[hostile x2 processes] {len(CASES)} cases, {len(failed)} failed")
    assert not failed, failed
    _assert_both_answer(server)


def test_disconnects_leave_nothing_running_in_either_process(server: ServerProcess) -> None:
    """Clients that leave mid-answer, spread over both processes: every engine request is
    aborted (nothing runs after, in gramserve or vLLM) and the departures are counted."""
    from tests.reliability._probe import metric
    from tests.reliability.test_load import _raw_request, _wait_idle

    n = 40
    with httpx.Client(base_url=server.base, headers=HEADERS, timeout=120) as c:
        before = metric(c, "gramserve_client_disconnects_total")
        bodies = [(json.dumps({"model": MODEL, "stream": i % 2 == 0, "max_tokens": 1900, "ignore_eos": True,
                               "messages": [{"role": "user", "content": f"Count to {i}."}]}).encode(), i % 2 == 0)
                  for i in range(n)]
        with ThreadPoolExecutor(10) as pool:
            list(pool.map(lambda b: _raw_request(server.port, b[0], read_first=b[1]), bodies))
        ours, engine = _wait_idle(c)
        gone = metric(c, "gramserve_client_disconnects_total") - before
        engine = _engine_running_after_fresh_steps(server, c)
    print(f"\n[{n} disconnects x2 processes] counted {gone:.0f}; running after: gramserve {ours:.0f}, vLLM {engine:.0f}")
    assert (ours, engine) == (0, 0)
    assert gone >= n * 3 // 4  # a few may finish before their socket closes
    _assert_both_answer(server)


def _engine_running_after_fresh_steps(server: ServerProcess, c: httpx.Client, timeout: float = 60) -> float:
    """vLLM's running gauge, as fresh engine steps report it. The engine sends each step's stats to
    one front end only (vLLM's ``Scheduler.update_from_output``: "Return stats to only one of the
    front-ends"), and an idle engine takes no step, so the process that last got stats while the
    aborted streams ran may still show their count (its value is summed into /metrics). A few short
    requests (a connection each, so both processes get some) make each record a step taken after."""
    from tests.reliability._probe import metric

    deadline = time.monotonic() + timeout
    while True:
        for _ in range(6):
            with httpx.Client(base_url=server.base, headers=HEADERS, timeout=120) as one:
                one.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 2,
                                                       "messages": [{"role": "user", "content": "Hi"}]})
        engine = metric(c, "vllm:num_requests_running")
        if engine == 0 or time.monotonic() > deadline:
            return engine
        time.sleep(0.5)


def _assert_both_answer(server: ServerProcess) -> None:
    """Both API processes are alive and a normal request is answered."""
    assert len(_session_pids(server.proc.pid)) == 2, server.tail()
    with httpx.Client(base_url=server.base, headers=HEADERS, timeout=120) as c:
        assert c.get("/health").status_code == 200
        r = c.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 1,
                                                  "messages": [{"role": "user", "content": "Hi"}]})
        assert r.status_code == 200, r.text[:300]


def test_sigterm_drains_every_process_and_exits_0(server: ServerProcess) -> None:
    """Runs last in this module: it ends the module's server (one server start for the module)."""
    pids = _session_pids(server.proc.pid)
    assert len(pids) == 2
    assert _streamed(server.base, 0) is not None
    code = server.stop()
    assert code == 0, server.tail()
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")]
