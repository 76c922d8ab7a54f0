"""server/histogram.py: bulk observations give the samples one ``observe`` per value gives, on both paths
(sorted cuts for many finite values, one search per value otherwise)."""
from __future__ import annotations

import math
import random
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Histogram

from server import histogram
from server.histogram import observe_many

BUCKETS = (0.005, 0.01, 0.1, 1.0, 2.5, 10.0)


def _samples(reg: CollectorRegistry) -> dict[Any, float]:
    return {(s.name, tuple(s.labels.items())): s.value for f in reg.collect() for s in f.samples
            if not s.name.endswith("_created")}


def _same_as_one_by_one(batches: list[list[float]]) -> None:
    one, bulk = CollectorRegistry(), CollectorRegistry()
    h1 = Histogram("h", "d", buckets=BUCKETS, registry=one)
    h2 = Histogram("h", "d", buckets=BUCKETS, registry=bulk)
    for values in batches:
        for v in values:
            h1.observe(v)
        observe_many(h2, values)
    a, b = _samples(one), _samples(bulk)
    assert a.keys() == b.keys()
    for key in a:
        if key[0] == "h_sum":
            assert (math.isnan(a[key]) and math.isnan(b[key])) or math.isclose(a[key], b[key], rel_tol=1e-12), key
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize("seed", range(5))
def test_many_finite_values_are_counted_as_one_by_one(seed: int) -> None:
    rnd = random.Random(seed)
    pool = [*BUCKETS, 0.0, -1.0, 1e9, 0.0050000001, 0.0049999999]  # on, beside, below and past the bounds
    batches = [[rnd.choice(pool) if rnd.random() < 0.3 else rnd.uniform(-0.1, 12.0) for _ in range(rnd.randint(16, 300))]
               for _ in range(6)]
    assert all(len(b) >= histogram._SORTED_FROM for b in batches)  # the sorted path
    _same_as_one_by_one(batches)


def test_a_mixed_batch_with_infinity_past_the_last_bound() -> None:
    rnd = random.Random(4)
    values = [rnd.choice((0.0, 0.001, 0.5, 1.0, 2.5, 7.0, 1e9, -1.0)) * rnd.random() for _ in range(500)]
    _same_as_one_by_one([values + [0.005, 0.01, 10.0, float("inf")]])  # on the bounds themselves, and past the last


def test_all_in_one_bucket_and_all_past_the_last_bound() -> None:
    _same_as_one_by_one([[0.001] * 40, [99.0] * 40, [10.0] * 20, [0.005] * 20])


def test_few_values_or_a_non_finite_one_take_the_per_value_path(monkeypatch: pytest.MonkeyPatch) -> None:
    sorted_calls: list[int] = []
    real = histogram._observe_sorted
    monkeypatch.setattr(histogram, "_observe_sorted", lambda *a: sorted_calls.append(1) or real(*a))
    _same_as_one_by_one([[0.2, 3.0, 0.005], [0.1] * 30 + [float("inf")], [0.1] * 30 + [float("nan")] * 2])
    assert sorted_calls == []
    _same_as_one_by_one([[0.1] * 30])
    assert sorted_calls == [1]
