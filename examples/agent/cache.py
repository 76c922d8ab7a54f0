"""A TTL cache for tool observations keyed by (tool, canonical arguments).

The same call made twice in one context, or by two parallel calls at the same moment, runs once:
a second caller waits for the first one's result instead of running the tool again.
"""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

__all__ = ["TTLCache", "canonical_key"]


def canonical_key(tool: str, arguments: dict[str, Any]) -> str:
    """The same arguments whatever their key order or spacing give the same key."""
    return tool + ":" + json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class TTLCache:
    def __init__(self, *, ttl_s: float = 300.0, max_entries: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._done: dict[str, tuple[float, Any]] = {}
        self._running: dict[str, Future] = {}
        self.hits = 0
        self.misses = 0

    def get_or_run(self, key: str, compute: Callable[[], Any], *, keep: Callable[[Any], bool] = lambda _: True) -> tuple[Any, bool]:
        """(value, was_cached). ``keep(value)`` False: the value is returned but not stored (errors)."""
        with self._lock:
            now = self._clock()
            entry = self._done.get(key)
            if entry is not None and entry[0] > now:
                self.hits += 1
                return entry[1], True
            pending = self._running.get(key)
            if pending is None:
                pending = self._running[key] = Future()
                owner = True
                self.misses += 1
            else:
                owner = False
                self.hits += 1
        if not owner:
            return pending.result(), True
        try:
            value = compute()
        except BaseException as exc:
            with self._lock:
                del self._running[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._running[key]
            if keep(value):
                self._done[key] = (self._clock() + self.ttl_s, value)
                self._evict()
        pending.set_result(value)
        return value, False

    def _evict(self) -> None:
        now = self._clock()
        for key in [k for k, (exp, _) in self._done.items() if exp <= now]:
            del self._done[key]
        while len(self._done) > self.max_entries:
            del self._done[next(iter(self._done))]

    def __len__(self) -> int:
        return len(self._done)
