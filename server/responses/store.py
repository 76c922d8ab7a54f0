"""Stored responses (``store: true``): bounded in memory, with a time to live.

``previous_response_id`` continues a stored response's conversation, and
``GET``/``DELETE /v1/responses/{id}`` read and remove one. The store is per process: behind
several replicas a continuation must reach the replica that answered (sticky sessions), or
the client resends the conversation as ``input`` items. Entries past the size bound (least
recently used first) or the TTL are gone, and their ids answer 404.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from server.errors import APIError
from server.json_types import JsonObject
from server.lru import BoundedLRU

__all__ = ["StoredResponse", "ResponseStore"]


@dataclass(frozen=True)
class StoredResponse:
    body: JsonObject  # the Response object as it was returned
    conversation: tuple[JsonObject, ...]  # chat messages up to and including this answer
    input_items: tuple[JsonObject, ...]  # the request's input items, for GET .../input_items

    @property
    def id(self) -> str:
        """The response's id (the server's own: a string)."""
        response_id = self.body["id"]
        assert isinstance(response_id, str)
        return response_id


class ResponseStore:
    """Least-recently-used map of response id -> :class:`StoredResponse`, each kept ``ttl_s``."""

    def __init__(self, *, max_entries: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        self._items: BoundedLRU[str, tuple[float, StoredResponse]] = BoundedLRU(max_entries=max_entries)

    def __len__(self) -> int:
        return len(self._items)

    def put(self, entry: StoredResponse) -> None:
        self._items.put(entry.id, (self._clock() + self.ttl_s, entry))

    def get(self, response_id: str, *, param: str | None = None) -> StoredResponse:
        """The stored response; 404 in the error envelope when unknown, expired or evicted."""
        found = self._items.get(response_id)
        if found is not None and found[0] < self._clock():
            self._items.pop(response_id)
            found = None
        if found is None:
            raise APIError(f"No response with id '{response_id}' is stored here (it was never stored, has expired "
                           f"after {self.ttl_s:g} s, or was evicted by newer ones). Send the conversation as "
                           "'input' items instead.", param=param, code="not_found")
        return found[1]

    def delete(self, response_id: str) -> None:
        self.get(response_id)
        self._items.pop(response_id)
