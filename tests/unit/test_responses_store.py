"""server/responses/store.py: bounded, least recently used first, with a TTL."""
from __future__ import annotations

import pytest

from server.errors import APIError
from server.responses.store import ResponseStore, StoredResponse


def entry(i: str) -> StoredResponse:
    return StoredResponse(body={"id": i}, conversation=(), input_items=())


def test_lru_bound_and_ttl():
    now = [0.0]
    s = ResponseStore(max_entries=2, ttl_s=10, clock=lambda: now[0])
    for i in "abc":
        s.put(entry(i))
    assert len(s) == 2
    with pytest.raises(APIError) as exc:
        s.get("a")
    assert exc.value.status == 404 and exc.value.code == "not_found"
    s.get("b")  # b is now the most recent: c goes first
    s.put(entry("d"))
    assert s.get("b").body == {"id": "b"}
    with pytest.raises(APIError):
        s.get("c")
    now[0] = 11
    with pytest.raises(APIError):
        s.get("b")


def test_size_zero_stores_nothing_and_delete_of_unknown_is_404():
    s = ResponseStore(max_entries=0, ttl_s=10)
    s.put(entry("a"))
    assert len(s) == 0
    with pytest.raises(APIError) as exc:
        s.delete("a")
    assert exc.value.status == 404
