"""Helpers for the reliability suite: envelope checks, server health, process memory."""
from __future__ import annotations

from typing import Any

import httpx
import psutil

__all__ = ["assert_envelope", "assert_healthy", "rss_bytes", "metric", "metric_in", "scrape"]


def assert_envelope(r: httpx.Response, status: int, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The response is the OpenAI error envelope with this status (and param / code when given)."""
    assert r.status_code == status, (r.status_code, r.text[:500])
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


def assert_healthy(http: httpx.Client, model: str) -> None:
    """Health is 200 and a normal request is answered."""
    assert http.get("/health").status_code == 200
    r = http.post("/v1/chat/completions", json={"model": model, "max_tokens": 1, "temperature": 0,
                                                  "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("length", "stop"), r.text[:300]


def rss_bytes(pid: int) -> int:
    """Resident memory of a process and all its children (the engine core runs in a child)."""
    proc = psutil.Process(pid)
    total = proc.memory_info().rss
    for child in proc.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def scrape(http: httpx.Client) -> str:
    """The text of /metrics; a scrape that fails raises with the answer (it is never read as zeros)."""
    r = http.get("/metrics")
    assert r.status_code == 200, f"/metrics answered {r.status_code}: {r.text[:500]}"
    return r.text


def metric_in(text: str, name: str) -> float:
    """Sum of a Prometheus metric's samples in a scrape's ``text``; a metric it lacks raises."""
    values = [float(line.rsplit(" ", 1)[-1]) for line in text.splitlines()
              if line.startswith(name + " ") or line.startswith(name + "{")]
    assert values, f"/metrics lacks {name}"
    return sum(values)


def metric(http: httpx.Client, name: str) -> float:
    """Sum of a Prometheus metric's samples on /metrics."""
    return metric_in(scrape(http), name)
