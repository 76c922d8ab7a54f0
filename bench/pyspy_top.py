"""Top functions of a py-spy profile: self and inclusive share of the samples.

Record the live API process (not its engine children) under load, then summarise:

    py-spy record --pid $(pgrep -f 'gramserve serve') --duration 60 --rate 200 --format raw -o prof.txt
    python -m bench.pyspy_top prof.txt [--top 25] [--match server/,tool_parsers/]

``--format raw`` writes one collapsed stack per line (``frame;frame;... count``), each frame
``function (file:line)``. py-spy's idle detection misses threads blocked in C (a thread
pool's ``_worker`` waiting on its queue, ``select``), so stacks ending in such a wait are
dropped (``--drop-leaf``) and the shares are of the remaining, working samples.
"""
from __future__ import annotations

import argparse
import re
from collections import Counter
from typing import Iterable

__all__ = ["IDLE_LEAVES", "parse_collapsed", "top_functions", "main"]

_LINE = re.compile(r"^(?P<stack>.*)\s(?P<count>\d+)$")
_FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>.*?)(?::\d+)?\)$")


def _key(frame: str) -> str:
    """``function (file)``, without the line number, so one function is one row."""
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    file = m.group("file")
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    return f"{m.group('fn')} ({file})"


IDLE_LEAVES = r"^(_worker \(concurrent/futures/thread\.py\)|\w*\.?select \(selectors\.py\)|wait \(threading\.py\)|_wait_for_tstate_lock .*)$"


def parse_collapsed(lines: Iterable[str], *, drop_leaf: str | None = None) -> list[tuple[list[str], int]]:
    """(frames root-first, sample count) per collapsed-stack line; stacks whose last frame
    matches the regex ``drop_leaf`` (a thread waiting) are left out."""
    drop = re.compile(drop_leaf) if drop_leaf else None
    out = []
    for line in lines:
        m = _LINE.match(line.rstrip("\n"))
        if m:
            frames = [_key(f) for f in m.group("stack").split(";") if f]
            if drop is not None and frames and drop.match(frames[-1]):
                continue
            out.append((frames, int(m.group("count"))))
    return out


def top_functions(stacks: list[tuple[list[str], int]]) -> tuple[int, Counter, Counter]:
    """(total samples, self samples per function, inclusive samples per function)."""
    total = sum(n for _, n in stacks)
    own: Counter = Counter()
    incl: Counter = Counter()
    for frames, n in stacks:
        if frames:
            own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    return total, own, incl


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pyspy_top", description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--match", default="", help="comma-separated substrings: inclusive rows only for these files")
    ap.add_argument("--drop-leaf", default=IDLE_LEAVES, help="regex of last frames that mean a waiting thread")
    a = ap.parse_args(argv)
    with open(a.path) as f:
        total, own, incl = top_functions(parse_collapsed(f, drop_leaf=a.drop_leaf or None))
    print(f"{total} working samples\n\n| self % | function |\n|---:|---|")
    for fn, n in own.most_common(a.top):
        print(f"| {100 * n / total:.1f} | `{fn}` |")
    wanted = [m for m in a.match.split(",") if m]
    print("\n| inclusive % | function |\n|---:|---|")
    rows = [(fn, n) for fn, n in incl.most_common() if not wanted or any(w in fn for w in wanted)]
    for fn, n in rows[:a.top]:
        print(f"| {100 * n / total:.1f} | `{fn}` |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
