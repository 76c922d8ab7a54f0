"""GenerationTimer: TTFT once, every inter-token latency observed (in bulk), the waiting gauge balanced."""
from __future__ import annotations

from prometheus_client import REGISTRY

from server.chat.generation import GenerationTimer
from server.engine.base import TokenChunk


def _count(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def test_every_inter_token_latency_is_observed_by_the_end() -> None:
    itl, ttft = "gramserve_inter_token_latency_seconds_count", "gramserve_time_to_first_token_seconds_count"
    waiting = "gramserve_requests_waiting"
    before_itl, before_ttft, before_waiting = _count(itl), _count(ttft), _count(waiting)
    timer = GenerationTimer()
    assert _count(waiting) == before_waiting + 1
    chunks = GenerationTimer.ITL_BATCH + 10
    for i in range(chunks):
        timer.on_chunk(TokenChunk(0, "x", 2 if i % 3 else 1))
        timer.on_chunk(TokenChunk(0, "", 0))  # no tokens: no latency
    assert _count(ttft) == before_ttft + 1 and _count(waiting) == before_waiting
    # a running request's latencies reach a scrape at most ITL_BATCH chunks late
    assert _count(itl) == before_itl + GenerationTimer.ITL_BATCH
    timer.close()
    assert _count(itl) == before_itl + chunks - 1  # the first token has a TTFT, each later one an ITL
    timer.close()  # twice is harmless
    assert _count(itl) == before_itl + chunks - 1 and _count(waiting) == before_waiting


def test_a_request_that_never_produced_a_token_leaves_the_waiting_gauge() -> None:
    waiting = "gramserve_requests_waiting"
    before = _count(waiting)
    timer = GenerationTimer()
    timer.close()
    assert _count(waiting) == before
