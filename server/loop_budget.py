"""Run request planning on the event loop when it is cheap, in a worker thread when it is not.

A plan is pure Python (render, tokenise, look up the checked constraint): while it runs in a
worker thread it holds the GIL, so the event loop waits for it anyway, and the hop itself costs
a thread hand-off and a GIL switch (up to the 5 ms switch interval) per request, which showed as
~9% of the API process's busy samples under a tools load (docs/performance.md). What can take
long is a *miss*: a schema analysed or a grammar compiled the first time, or a shortest answer
worked out. So a small request is planned on the loop, and each step that may block calls
:func:`may_block` first; inside :func:`inline` that raises :class:`OffLoop`, and the whole plan
is built again in a thread (a plan has no effects before its misses, so building it twice is
safe; a miss costs far more than the repeated render). The routes decide where a plan runs
(``server/api/routes/_plan.py``).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["INLINE_MAX_BODY_BYTES", "OffLoop", "inline", "may_block"]

#: A request body at most this large is planned on the loop (its render and tokenising take
#: well under a millisecond); a larger one always goes to a thread.
INLINE_MAX_BODY_BYTES = 16 * 1024

_INLINE: ContextVar[bool] = ContextVar("gramserve_plan_inline", default=False)


class OffLoop(BaseException):
    """A step that may block was reached while planning on the event loop. A BaseException, so
    the plan's own ``except Exception`` handlers (a template error made a 400) let it through."""


def may_block() -> None:
    """Call before a step that can take long (a compile, a schema analysis): off the loop it is a
    no-op, on it it raises :class:`OffLoop`."""
    if _INLINE.get():
        raise OffLoop


@contextlib.contextmanager
def inline() -> Iterator[None]:
    """Within this block :func:`may_block` raises."""
    token = _INLINE.set(True)
    try:
        yield
    finally:
        _INLINE.reset(token)
