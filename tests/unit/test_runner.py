"""server/runner.py: what the process does around serving (the rest is in tests/e2e/test_lifecycle.py)."""
from __future__ import annotations

import gc
import weakref

from server.runner import freeze_startup_heap


class _Node:
    pass


def test_startup_heap_is_out_of_the_collectors_reach_and_new_garbage_still_goes() -> None:
    startup = _Node()
    startup.me = startup  # a cycle built at startup: alive, walked by every full collection
    try:
        frozen = freeze_startup_heap()
        # what it returns is the freeze count (frozen objects freed since, e.g. by another thread,
        # lower the count: a full CI run saw 2 fewer; nothing else raises it)
        assert frozen >= 1000 and frozen - 1000 <= gc.get_freeze_count() <= frozen
        assert not any(o is startup for o in gc.get_objects(generation=2))
        later = _Node()
        later.me = later  # a cycle made while serving, then dropped: still collected
        gone = weakref.ref(later)
        del later
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()
