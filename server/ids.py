"""Ids for requests, completions and response items, cheaper than ``uuid.uuid4().hex``.

``uuid4()`` costs a ``getrandom`` call, a 128-bit int and a ``UUID`` object per id: about 3% of the
API process's CPU at c32. ``new_id`` is a per-process random prefix (64 bits) and a counter (64
bits), 32 lowercase hex characters like ``uuid4().hex``, so clients and the recorded exchanges'
normalisation see the same shape. Several API processes (``--api-server-count``) and restarts each
draw their own prefix; a forked child draws a new one (``os.register_at_fork``), so no two
processes count under the same prefix.

A counter is guessable, so an id that lets its holder read something back (a stored response:
``GET /v1/responses/{id}`` is not scoped by key) comes from ``secret_id``: 128 random bits.
A leaf: imports nothing of the server.
"""
from __future__ import annotations

import itertools
import os

__all__ = ["new_id", "secret_id"]


def _fresh() -> tuple[str, itertools.count[int]]:
    return os.urandom(8).hex(), itertools.count()


_prefix, _counter = _fresh()


def _reseed() -> None:
    """In a forked child: a prefix of its own, else parent and child would make the same ids."""
    global _prefix, _counter
    _prefix, _counter = _fresh()


os.register_at_fork(after_in_child=_reseed)


def new_id() -> str:
    """32 hex characters, unique across processes and restarts (not secret: see ``secret_id``)."""
    return f"{_prefix}{next(_counter):016x}"


def secret_id() -> str:
    """32 hex characters of 128 random bits: for ids that act as a key to what they name."""
    return os.urandom(16).hex()
