"""The one bounded, least-recently-used map every per-process memory uses.

Per-process memories (checked schemas, request constraints, compiled grammars, specs vLLM has
passed, stored responses) are keyed by what clients send, so each must be bounded in entries
and, where keys are the client's own text, in their total size: a client sending large, ever
new schemas cannot grow the process. Thread-safe: compiles finish on other threads.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["BoundedLRU"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_ABSENT: object = object()


def _size(key: Hashable) -> int:
    """A key's weight against ``max_chars``: its text length (a string, or a tuple of them)."""
    if isinstance(key, str):
        return len(key)
    if isinstance(key, tuple):
        return sum(len(k) for k in key if isinstance(k, str))
    return 0


class BoundedLRU(Generic[K, V]):
    """Bounded in entries and in the total length of string keys; least recently used leaves first.

    A key longer than 1/16 of ``max_chars`` is not kept at all (one entry may not push out
    most of the others). ``get`` and ``put`` are O(1).
    """

    def __init__(self, *, max_entries: int, max_chars: int | None = None) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._chars = 0
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value for ``key`` (now the most recently used), else ``default``."""
        with self._lock:
            found = self._items.get(key, _ABSENT)
            if found is _ABSENT:
                return default
            self._items.move_to_end(key)
            return found  # type: ignore[return-value]

    def put(self, key: K, value: V) -> None:
        """Remember ``value`` (replacing any), evicting the least recently used beyond the bounds."""
        size = _size(key)
        if self.max_entries <= 0 or (self.max_chars is not None and size > self.max_chars // 16):
            return
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
            else:
                self._chars += size
            self._items[key] = value
            while len(self._items) > self.max_entries or (
                    self.max_chars is not None and self._chars > self.max_chars):
                self._chars -= _size(self._items.popitem(last=False)[0])

    def pop(self, key: K) -> V | None:
        """Forget ``key``; its value, or None."""
        with self._lock:
            found = self._items.pop(key, _ABSENT)
            if found is _ABSENT:
                return None
            self._chars -= _size(key)
            return found  # type: ignore[return-value]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._chars = 0

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        return len(self._items)
