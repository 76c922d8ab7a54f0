"""server/engine/vllm_stats.py: the vLLM metrics a scrape reads are those per-step recording gives.

The same engine steps (synthetic ``SchedulerStats`` / ``IterationStats`` of vLLM's own types,
with prefills, decodes, finished requests and cache hits) go once through vLLM's
``PrometheusStatLogger`` and once through ``CoalescingStatLogger``; every ``vllm:*`` sample
must match after a flush.
"""
from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("vllm")

from prometheus_client import REGISTRY  # noqa: E402


@pytest.fixture(scope="module")
def vllm_config(hf_model_dir: Path) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext

    args = AsyncEngineArgs(model=str(hf_model_dir), max_model_len=2048, enforce_eager=True, dtype="bfloat16")
    return args.create_engine_config(UsageContext.ENGINE_CONTEXT)


@pytest.fixture(autouse=True)
def _restore_vllm_metrics() -> Iterator[None]:
    """The loggers here replace the process's vllm:* collectors; leave none of theirs behind."""
    yield
    from vllm.v1.metrics.prometheus import unregister_vllm_metrics

    unregister_vllm_metrics()


def _steps(seed: int, n: int = 300) -> list[tuple[Any, Any]]:
    """Engine steps as vLLM's output handler would record them: 1-8 running requests, prefills,
    decodes with inter-token latencies, finished requests, prefix-cache queries and hits."""
    from vllm.v1.metrics.stats import FinishedRequestStats, IterationStats, PrefixCacheStats, SchedulerStats

    rnd = random.Random(seed)
    steps = []
    for k in range(n):
        sched = SchedulerStats(num_running_reqs=rnd.randint(1, 8), num_waiting_reqs=rnd.randint(0, 3),
                               kv_cache_usage=rnd.random(),
                               prefix_cache_stats=PrefixCacheStats(requests=1, queries=rnd.randint(0, 500),
                                                                   hits=rnd.randint(0, 100)))
        it = IterationStats()
        running = sched.num_running_reqs
        it.num_generation_tokens = running
        it.inter_token_latencies_iter = [rnd.choice((0.004, 0.02, 0.3, 2.0)) * rnd.random() for _ in range(running)]
        if k % 7 == 0:  # a prefill
            it.prompt_token_stats.computed = rnd.randint(10, 900)
            it.prompt_token_stats.total = it.prompt_token_stats.computed + 16
            it.prompt_token_stats.local_cache_hit = 16
            it.prompt_token_stats.cached_tokens = 16
            it.time_to_first_tokens_iter = [rnd.random()]
            it.n_params_iter = [1]
            it.max_num_generation_tokens_iter = [rnd.randint(1, 128)]
        if k % 11 == 0:
            it.finished_requests = [FinishedRequestStats(
                finish_reason=rnd.choice(list(_finish_reasons())), e2e_latency=rnd.random() * 10,
                num_prompt_tokens=rnd.randint(10, 900), num_generation_tokens=rnd.randint(1, 128),
                max_tokens_param=128, queued_time=rnd.random(), prefill_time=rnd.random(),
                inference_time=rnd.random() * 5, decode_time=rnd.random() * 4,
                mean_time_per_output_token=rnd.random() / 10, num_cached_tokens=rnd.randint(0, 5))]
        steps.append((sched if k % 13 else None, it))  # some steps carry no scheduler stats
    return steps


def _finish_reasons() -> Any:
    from vllm.v1.engine import FinishReason

    return FinishReason


def _samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in REGISTRY.collect():
        if not family.name.startswith("vllm:"):
            continue
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _record(logger: Any, steps: list[tuple[Any, Any]]) -> None:
    for sched, it in steps:
        logger.record(sched, it, None, 0)


def test_a_scrape_reads_what_per_step_recording_gives(vllm_config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    from server.engine.vllm_stats import CoalescingStatLogger

    steps = _steps(1)
    _record(PrometheusStatLogger(vllm_config, [0]), steps)
    want = _samples()
    merged = CoalescingStatLogger(vllm_config, [0])
    assert merged.coalescing
    _record(merged, steps)
    before = _samples()
    calls = []
    real_record = PrometheusStatLogger.record
    monkeypatch.setattr(PrometheusStatLogger, "record", lambda self, *a, **k: (calls.append(a), real_record(self, *a, **k)))
    merged.flush()
    assert len(calls) == 1  # the steps were merged into one record, not recorded one by one
    got = _samples()
    assert set(got) == set(want)
    for key, value in want.items():
        assert math.isclose(got[key], value, rel_tol=1e-9, abs_tol=1e-9), key
    # nothing was recorded before the flush: the steps waited
    assert before[("vllm:generation_tokens_total", (("engine", "0"), ("model_name", _name(vllm_config))))] == 0
    assert got[("vllm:generation_tokens_total", (("engine", "0"), ("model_name", _name(vllm_config))))] == sum(
        it.num_generation_tokens for _, it in steps)
    assert got[("vllm:iteration_tokens_total_count", (("engine", "0"), ("model_name", _name(vllm_config))))] == len(steps)


def _name(vllm_config: Any) -> str:
    return vllm_config.model_config.served_model_name


def test_the_waiting_steps_are_bounded(vllm_config: Any) -> None:
    from server.engine import vllm_stats

    logger = vllm_stats.CoalescingStatLogger(vllm_config, [0])
    _record(logger, _steps(2, n=vllm_stats.MAX_PENDING_STEPS + 5))
    assert len(logger._pending) == 5  # recorded on their own once the bound was reached
    key = ("vllm:iteration_tokens_total_count", (("engine", "0"), ("model_name", _name(vllm_config))))
    assert _samples()[key] == vllm_stats.MAX_PENDING_STEPS


def test_steps_with_stats_the_merge_does_not_know_are_recorded_at_once_in_order(vllm_config: Any) -> None:
    from vllm.v1.metrics.loggers import PrometheusStatLogger
    from vllm.v1.metrics.stats import PrefixCacheStats

    from server.engine.vllm_stats import CoalescingStatLogger

    steps = _steps(3, n=40)
    odd = steps[20][0]
    odd.connector_prefix_cache_stats = PrefixCacheStats(requests=1, queries=50, hits=7)
    _record(PrometheusStatLogger(vllm_config, [0]), steps)
    want = _samples()
    logger = CoalescingStatLogger(vllm_config, [0])
    _record(logger, steps)
    assert len(logger._pending) == 19  # the 20 before it were recorded when it came, then it alone
    logger.flush()
    got = _samples()
    for key, value in want.items():
        assert math.isclose(got[key], value, rel_tol=1e-9, abs_tol=1e-9), key


def test_stats_of_an_unknown_shape_are_recorded_one_by_one(vllm_config: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A field the merge cannot add up (as a later vLLM might bring) means vLLM's own code, step by step."""
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    from server.engine.vllm_stats import CoalescingStatLogger

    steps = _steps(5, n=30)
    steps[7][1].new_vllm_field = 1.5  # a float: neither a count nor a list
    _record(PrometheusStatLogger(vllm_config, [0]), steps)
    want = _samples()
    logger = CoalescingStatLogger(vllm_config, [0])
    _record(logger, steps)
    calls = []
    real_record = PrometheusStatLogger.record
    monkeypatch.setattr(PrometheusStatLogger, "record", lambda self, *a, **k: (calls.append(a), real_record(self, *a, **k)))
    logger.flush()
    assert len(calls) == len(steps)
    got = _samples()
    for key, value in want.items():
        assert math.isclose(got[key], value, rel_tol=1e-9, abs_tol=1e-9), key


def test_a_merged_record_that_fails_is_logged_and_stops_the_merging(vllm_config: Any, monkeypatch: pytest.MonkeyPatch,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """The merge runs inside vLLM's output handler (at the bound, before an unmergeable step): an
    exception there would stop every request. Logged instead, and later steps go to vLLM's own code."""
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    from server.engine.vllm_stats import CoalescingStatLogger

    steps = _steps(6, n=20)
    logger = CoalescingStatLogger(vllm_config, [0])
    _record(logger, steps[:10])
    monkeypatch.setattr(CoalescingStatLogger, "_record_merged", lambda self, *a: 1 / 0)
    logger.flush()  # no exception out of it
    assert not logger.coalescing and "could not be recorded" in caplog.text and "ZeroDivisionError" in caplog.text
    calls = []
    real_record = PrometheusStatLogger.record
    monkeypatch.setattr(PrometheusStatLogger, "record", lambda self, *a, **k: (calls.append(a), real_record(self, *a, **k)))
    _record(logger, steps[10:])
    assert len(calls) == 10 and not logger._pending  # each step recorded at once, none kept
