"""server.lru: the one bounded LRU behind every per-process memory."""
from __future__ import annotations

import threading

from server.lru import BoundedLRU
from server.structured.from_request import new_constraint_memo


def test_least_recently_used_leaves_first():
    lru: BoundedLRU[str, int] = BoundedLRU(max_entries=2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # "a" now the most recent: "b" leaves next
    lru.put("c", 3)
    assert "b" not in lru and lru.get("a") == 1 and lru.get("c") == 3 and len(lru) == 2
    lru.put("a", 10)  # replacing keeps one entry
    assert len(lru) == 2 and lru.get("a") == 10


def test_stored_none_differs_from_absent():
    """A remembered "no problem" (None) is a hit: the default tells them apart."""
    lru: BoundedLRU[str, str | None] = BoundedLRU(max_entries=4)
    absent = object()
    lru.put("fine", None)
    assert lru.get("fine", absent) is None and lru.get("unseen", absent) is absent


def test_bounded_by_entries_and_key_size():
    lru: BoundedLRU[str, int] = BoundedLRU(max_entries=3, max_chars=1600)
    for i in range(5):
        lru.put(f"{i}".ljust(50), i)
    assert len(lru) == 3 and lru.get("0".ljust(50)) is None and lru.get("4".ljust(50)) == 4
    lru.put("big".ljust(101), -1)  # above 1/16 of the size bound: not kept
    assert lru.get("big".ljust(101)) is None and len(lru) == 3
    wide: BoundedLRU[str, int] = BoundedLRU(max_entries=100, max_chars=1600)
    for i in range(40):  # 100 characters each: the size bound holds 16
        wide.put(f"k{i}".ljust(100), i)
    assert len(wide) == 16 and wide.get("k39".ljust(100)) == 39 and wide.get("k23".ljust(100)) is None
    assert wide.pop("k39".ljust(100)) == 39 and wide.pop("k39".ljust(100)) is None
    for i in range(40, 57):  # the popped key's size was given back: 16 fit again, not 15
        wide.put(f"k{i}".ljust(100), i)
    assert len(wide) == 16


def test_tuple_keys_weigh_their_text():
    lru: BoundedLRU[tuple[str, str], bool] = BoundedLRU(max_entries=100, max_chars=1600)
    for i in range(20):
        lru.put(("json", f"{i}".ljust(96)), True)
    assert len(lru) == 16


def test_zero_entries_keeps_nothing():
    lru: BoundedLRU[str, int] = BoundedLRU(max_entries=0)
    lru.put("a", 1)
    assert len(lru) == 0 and lru.get("a") is None


def test_threads_keep_the_bounds():
    lru: BoundedLRU[str, int] = BoundedLRU(max_entries=50, max_chars=50 * 16 * 4)

    def work(n: int) -> None:
        for i in range(2000):
            key = f"{n}-{i % 97}".ljust(40)
            if lru.get(key) is None:
                lru.put(key, i)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(lru) == 50 and lru._chars == sum(len(k) for k in lru._items)


def test_the_constraint_memo_keeps_no_huge_tool_set():
    """A request's inputs above 512 KiB (1/16 of the memo's 8 MiB) are checked every time, and
    at most 256 tool sets are kept."""
    memo = new_constraint_memo()
    memo.put("t" * (512 << 10), ("ok", None, False))
    memo.put("t" * ((512 << 10) + 1), ("huge", None, False))
    assert memo.get("t" * (512 << 10)) == ("ok", None, False) and len(memo) == 1
    for i in range(300):
        memo.put(f"tools-{i}", (i, None, False))
    assert len(memo) == 256 and memo.get("tools-299") == (299, None, False)
