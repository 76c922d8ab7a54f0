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


def test_chunks_clocked_in_bulk_are_observed_as_one_on_chunk_each(monkeypatch) -> None:
    """``on_stamps`` (a text lane's chunks, clocked by the lane) gives the histograms the latencies
    one ``on_chunk`` per chunk gives at the same instants: the first a TTFT, each later one its
    latency per token."""
    from server import metrics
    from server.chat import generation

    counts = [1, 1, 3, 1, 2] * 30  # tokens per chunk (an engine output may carry several)
    instants = [10.0 + 0.01 * i * i for i in range(len(counts) + 1)]  # [0]: the request's start
    observed: dict[str, list[float]] = {"one": [], "bulk": []}
    ttfts: dict[str, list[float]] = {"one": [], "bulk": []}
    for way in ("one", "bulk"):
        clock = iter(instants)
        monkeypatch.setattr(generation.time, "perf_counter", lambda clock=clock: next(clock))
        monkeypatch.setattr(metrics, "observe_many", lambda h, values, way=way: observed[way].extend(values))
        monkeypatch.setattr(metrics.TTFT, "observe", lambda v, way=way: ttfts[way].append(v))
        timer = GenerationTimer()
        if way == "one":
            for n in counts:
                timer.on_chunk(TokenChunk(0, "x", n))
        else:
            stamps = [next(clock) for _ in counts]
            timer.on_stamps(stamps[:7], counts[:7])  # in two batches, as a lane hands them over
            timer.on_stamps(stamps[7:], counts[7:])
        timer.close()
    assert ttfts["one"] == ttfts["bulk"] == [instants[1] - instants[0]]
    assert observed["one"] == observed["bulk"] and len(observed["one"]) == len(counts) - 1
    assert observed["one"][1] == (instants[3] - instants[2]) / 3
