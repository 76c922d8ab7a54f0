"""vLLM's Prometheus engine metrics (``vllm:*``), recorded when they are read, not every engine step.

vLLM's ``PrometheusStatLogger.record`` runs in the API process once per engine step: ~20 gauge
sets and counter increments, plus one histogram observation per generated token (inter-token
latency) and per finished request. On a busy server that is one of the larger per-token costs
left in the API process (engine called directly, plain, one stream: 0.63 ms of CPU per token
with it, 0.49-0.55 with this logger; docs/performance.md). None of it is read until ``/metrics``
is scraped, so :class:`CoalescingStatLogger` keeps the steps' stats (a list append per step) and
records them merged when they are read (``flush``, called by the ``/metrics`` route) or when
:data:`MAX_PENDING_STEPS` are waiting:

- gauges (running, waiting, KV cache usage) take the newest step's values, as a scrape would;
- counters are increased once by the steps' sums;
- every histogram observation is kept, counted into its buckets in bulk.

So a scrape reads what per-step recording would have shown. Steps that carry stats this merge does
not know (KV connector, speculative decoding, LoRA, multimodal cache, ...) are recorded one by
one by vLLM's own code, as before; so is everything when the stats' shapes are not the ones
checked here (``tests/unit/test_vllm_stats.py`` compares the two ways metric by metric).
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from vllm.v1.metrics.loggers import PrometheusStatLogger
from vllm.v1.metrics.stats import IterationStats, PrefixCacheStats, PromptTokenStats, SchedulerStats

from server.histogram import observe_many  # (re-exported: the bulk histogram update began here)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance
    from vllm.v1.metrics.stats import MultiModalCacheStats

_Stats = TypeVar("_Stats", bound="DataclassInstance")  # one of vLLM's stats dataclasses

__all__ = ["CoalescingStatLogger", "MAX_PENDING_STEPS", "observe_many"]

log = logging.getLogger("gramserve.engine")

MAX_PENDING_STEPS = 512  # steps kept between reads at most: bounds memory and staleness when nobody scrapes

# SchedulerStats fields the merge does not sum: a step with any of them set is recorded alone.
_UNMERGED_SCHEDULER_FIELDS = ("connector_prefix_cache_stats", "spec_decoding_stats", "kv_connector_stats",
                              "ec_connector_stats", "perf_stats", "kv_cache_eviction_events")


class _Collect:
    """Stands in for a histogram while merged stats are recorded: keeps the observed values."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: list[float] = []

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        self.values.append(amount)


def _sum_dataclass(kind: type[_Stats], items: Sequence[_Stats]) -> _Stats:
    """A ``kind`` whose int fields are the items' sums and whose bool fields are their ``or``
    (fields equal in every item, such as constants, are kept)."""
    out = kind()
    for f in dataclasses.fields(kind):
        values = [getattr(x, f.name) for x in items]
        if all(v == values[0] for v in values) and not isinstance(values[0], int):
            setattr(out, f.name, values[0])
        elif all(isinstance(v, bool) for v in values):
            setattr(out, f.name, any(values))
        elif all(isinstance(v, int) for v in values):
            setattr(out, f.name, sum(values))
        elif not any(values):  # empty containers / None everywhere: nothing to add up
            continue
        else:
            raise _NotMergeable(f"{kind.__name__}.{f.name}")
    return out


class _NotMergeable(Exception):
    """Stats of a shape this merge does not know: record them one step at a time."""


def _merge_iterations(items: list[IterationStats]) -> IterationStats:
    out = IterationStats()
    merged: dict[str, Any] = {}  # IterationStats' fields: numbers and lists of vLLM's records
    for it in items:
        for name, value in vars(it).items():
            if name == "iteration_timestamp":
                merged[name] = value  # the newest step's
            elif name == "prompt_token_stats":
                continue
            elif isinstance(value, bool) or not isinstance(value, (int, list)):
                raise _NotMergeable(f"IterationStats.{name}")
            elif isinstance(value, list):
                merged.setdefault(name, []).extend(value)
            else:
                merged[name] = merged.get(name, 0) + value
    vars(out).update(merged)
    out.prompt_token_stats = _sum_dataclass(PromptTokenStats, [it.prompt_token_stats for it in items])
    return out


def _merge_scheduler(items: list[SchedulerStats]) -> SchedulerStats:
    """The newest step's stats (gauges), with the prefix-cache counts of all the steps."""
    prefix = _sum_dataclass(PrefixCacheStats, [s.prefix_cache_stats for s in items])
    return dataclasses.replace(items[-1], prefix_cache_stats=prefix)


def _mergeable(s: SchedulerStats | None) -> bool:
    if s is None:
        return True
    return not s.prefix_cache_stats.hits_by_source and not any(
        getattr(s, name) for name in _UNMERGED_SCHEDULER_FIELDS)


class CoalescingStatLogger(PrometheusStatLogger):
    """vLLM's Prometheus stat logger, recording a batch of engine steps at a time (module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: list[tuple[int, SchedulerStats | None, IterationStats | None]] = []
        # Per-step gauges and histograms this merge would get wrong: LoRA's info gauge is stamped
        # with the step's time, KV block histograms come from eviction events. Off: step by step
        # (also where those attributes are not the ones this was written against).
        self.coalescing = (getattr(self, "gauge_lora_info", True) is None
                           and getattr(self, "kv_cache_metrics_enabled", True) is False
                           and isinstance(getattr(self, "histogram_iteration_tokens", None), dict))
        self._histograms = [name for name, value in vars(self).items()
                            if name.startswith("histogram_") and isinstance(value, dict)]

    def record(self, scheduler_stats: SchedulerStats | None, iteration_stats: IterationStats | None,
               mm_cache_stats: MultiModalCacheStats | None = None, engine_idx: int = 0) -> None:
        if not self.coalescing or mm_cache_stats is not None or not _mergeable(scheduler_stats):
            self.flush()  # keep the order of the steps
            super().record(scheduler_stats, iteration_stats, mm_cache_stats, engine_idx)
            return
        if scheduler_stats is None and iteration_stats is None:
            return
        self._pending.append((engine_idx, scheduler_stats, iteration_stats))
        if len(self._pending) >= MAX_PENDING_STEPS:
            self.flush()

    def flush(self) -> None:
        """Record every waiting step now (before ``/metrics`` is read). Like ``record``, it runs on
        the event loop (vLLM's output handler, the async ``/metrics`` route): no lock is needed."""
        pending, self._pending = self._pending, []
        for engine_idx in dict.fromkeys(e for e, _, _ in pending):
            steps = [(s, it) for e, s, it in pending if e == engine_idx]
            scheds = [s for s, _ in steps if s is not None]
            iterations = [it for _, it in steps if it is not None]
            try:  # (before anything is recorded: a failure here records the steps one by one)
                sched = _merge_scheduler(scheds) if scheds else None
                merged = _merge_iterations(iterations) if iterations else None
            except Exception:  # noqa: BLE001 - _NotMergeable, or stats of another vLLM's shape
                for s, it in steps:
                    super().record(s, it, None, engine_idx)
                continue
            try:
                self._record_merged(engine_idx, sched, merged, iterations)
            except Exception:  # noqa: BLE001 - raised inside vLLM's output handler, it would stop every request
                log.exception("vLLM's merged engine stats could not be recorded; recording each step from now on")
                self.coalescing = False

    def _record_merged(self, engine_idx: int, sched: SchedulerStats | None, merged: IterationStats | None,
                       iterations: list[IterationStats]) -> None:
        """vLLM's own ``record`` of the merged stats, with each histogram's observations collected
        and then counted into the real histogram in bulk."""
        real = {name: getattr(self, name) for name in self._histograms}
        real = {name: per_engine for name, per_engine in real.items() if engine_idx in per_engine}
        collect = {name: _Collect() for name in real}
        for name, per_engine in real.items():
            setattr(self, name, {**per_engine, engine_idx: collect[name]})
        try:
            super().record(sched, merged, None, engine_idx)
        finally:
            for name, per_engine in real.items():
                setattr(self, name, per_engine)
        if "histogram_iteration_tokens" in collect:  # one observation per engine step, not per batch
            collect["histogram_iteration_tokens"].values = [
                it.prompt_token_stats.computed + it.num_generation_tokens for it in iterations]
        for name, c in collect.items():
            observe_many(real[name][engine_idx], c.values)
