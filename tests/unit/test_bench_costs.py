"""bench/stream_cost.py and bench/prepare_cost.py run (small sizes), so the tables they print stay real."""
from __future__ import annotations

import asyncio

import pytest

from bench import prepare_cost, stream_cost


@pytest.mark.parametrize("workload", ["plain", "tools"])
def test_stream_cost_measures_a_whole_stream(workload):
    cost = asyncio.run(stream_cost.measure(workload, 64, 1))
    assert 0 < cost < 100_000  # CPU microseconds per token


def test_prepare_cost_requests_are_valid_chat_requests():
    from server.protocol import ChatCompletionRequest

    bodies = prepare_cost.requests(salt="x")
    assert {"plain", "tools x1", "tools x8", "tools x32", "json_schema"} == set(bodies)
    for body in bodies.values():
        ChatCompletionRequest.model_validate(body)
    assert bodies["tools x8"]["tools"][7]["function"]["description"].endswith("(x).")
