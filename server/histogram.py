"""Histogram observations in bulk: the same samples as one ``observe`` per value, at a fraction of the cost.

A leaf utility (it imports nothing of the server): vLLM's stat logger (``server.engine.vllm_stats``) and
the request timer (``server.chat.generation``) both record per-token latencies through it.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import Histogram

__all__ = ["observe_many"]

#: From this many values, sorting them and cutting the sorted list at each bucket bound (one search per
#: bound) is cheaper than one search per value: 64 inter-token latencies into 13 buckets, 14.1 -> 5.6 µs.
_SORTED_FROM = 16


def observe_many(histogram: Histogram, values: list[float]) -> None:
    """``histogram.observe(v)`` for each value, with the buckets counted in bulk (same samples).

    Falls back to one ``observe`` per value where prometheus_client's internals are not the
    ones this was written against, and for values that are not finite.
    """
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if not values:
        return
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for v in values:
            histogram.observe(v)
        return
    if len(values) >= _SORTED_FROM and all(map(math.isfinite, values)):
        _observe_sorted(bounds, buckets, total, values)
        return
    counts: dict[int, int] = {}
    finite = 0.0
    for v in values:
        if not math.isfinite(v):
            histogram.observe(v)
            continue
        i = bisect_left(bounds, v)  # the first bucket whose upper bound is >= v, as observe() picks
        counts[i] = counts.get(i, 0) + 1
        finite += v
    for i, n in counts.items():
        buckets[i].inc(n)
    total.inc(finite)


def _observe_sorted(bounds: list[float], buckets: list[Any], total: Any, values: list[float]) -> None:
    """Finite ``values``: bucket ``k`` gets those ``<= bounds[k]`` and above ``bounds[k-1]``, which is
    where ``observe`` puts each (the first bucket whose upper bound is ``>= v``)."""
    ordered = sorted(values)
    done, n = 0, len(ordered)
    for k, bound in enumerate(bounds):
        upto = bisect_right(ordered, bound, done)
        if upto > done:
            buckets[k].inc(upto - done)
            done = upto
            if done == n:
                break
    total.inc(sum(values))  # in the values' own order, as the loop above adds them
