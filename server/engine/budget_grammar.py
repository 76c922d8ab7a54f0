"""Budget-aware closing in the engine: a grammar wrapper that ends the answer validly within ``max_tokens``.

vLLM asks a request's grammar for a token mask every step. :class:`BudgetGrammar` wraps the
request's XGrammar or llguidance grammar, counts the tokens taken, and near the end of the
budget narrows the mask (``server/engine/budget_plan.py`` finds the ending):

* **watch**: the shortest ending from the current state (greedy walk, well under a millisecond
  for JSON; the last one re-checked and reused while it holds) is worked out every step once the
  tokens left come within reach of it, every 16th step before that, and every 16th while the walk
  finds none (an ending longer than its reach);
* **text**: inside free text (a string's content), after tokens that can neither leave it nor end
  inside a character, a step finds what the last one found and is not looked at (at most
  :data:`_REWALK_EVERY` in a row);
* **choices**: nearer the end, at a choice between structures, each opening token the mask allows
  is tried on a copy and banned when its shortest ending would not fit in what is left after it
  (an array item can cost more than the whole answer's minimum);
* **zone** (tokens left <= ending + :data:`ZONE`): only tokens that open nothing may be written
  (no brackets, quotes, commas, colons, ``<`` or ``|``), besides the ending's first token and
  stop: string content and digits go on, new properties, items, calls and tags do not, so the
  ending cannot grow past the budget in one step;
* **close** (tokens left <= ending): the ending is forced token by token, each the longest token
  of its next bytes that the live mask allows; the answer is complete when the budget is spent,
  and vLLM reports ``length``. Where a look-ahead walk finds a shorter ending than the greedy one,
  that is forced instead. A step that would leave no token allowed keeps the grammar's own mask.

The budget travels in the grammar spec (``BudgetHeader.wrap``), which only this backend reads.
Nothing here runs for a request without a budget header: the plain workload pays nothing.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from server.engine.budget_plan import (
    PROBE,
    BudgetHeader,
    GuidanceBytes,
    Vocab,
    XGrammarBytes,
    leaves_free_text,
    shortest_completion,
)

if TYPE_CHECKING:
    import torch
    from vllm.v1.structured_output.backend_guidance import GuidanceGrammar
    from vllm.v1.structured_output.backend_types import StructuredOutputGrammar
    from vllm.v1.structured_output.backend_xgrammar import XgrammarGrammar

__all__ = ["NON_NEUTRAL", "ZONE", "BudgetGrammar", "BudgetTables"]

log = logging.getLogger("gramserve.budget")

#: Tokens before the ending is forced in which nothing new may be opened.
ZONE = 8
#: Bytes that open (or delimit) structure in some call format or JSON: a token holding one is not "neutral".
NON_NEUTRAL = frozenset(b'{}[]<>",:|\\')
#: Tokens of room kept when the ending is forced (0: the answer ends exactly as the budget does, so
#: its finish is ``length`` and it is marked; the zone keeps a free token from growing the ending).
_SLACK = 0
#: Tokens tried one by one after a complete answer (more: free text, kept as neutral tokens).
_TRY_AT_MOST = 64
#: Within this many tokens of the ending (at least), every step is looked at and a choice between
#: structures is checked token by token: what one token may open is assumed to cost no more.
_LOOKOUT = 64
#: Tokens after which the ending is walked anew even while the last one stays valid (it may have
#: become longer than needed, e.g. once a string reached its minLength).
_REWALK_EVERY = 8
#: Steps between two looks at the ending while the budget is still far from it.
_FAR_EVERY = 16


#: The inner grammar's matcher as the budget reads it.
_Matcher: TypeAlias = "XGrammarBytes | GuidanceBytes"


class BudgetTables:
    """Per process and tokenizer: the vocabulary as bytes, and the row of "neutral" tokens."""

    def __init__(self, token_bytes: list[bytes], *, special: list[int], words: int) -> None:
        import torch

        self.vocab = Vocab(token_bytes, special=special)
        self.token_bytes = token_bytes
        neutral = torch.zeros(words * 32, dtype=torch.bool)
        skip = set(special)
        for tid, data in enumerate(token_bytes[: words * 32]):
            if data and tid not in skip and not NON_NEUTRAL.intersection(data):
                neutral[tid] = True
        # pack into the int32 words of a token bitmask row (bit i of word w = token 32w + i)
        weights = torch.tensor([1 << i for i in range(32)], dtype=torch.int64)
        packed = (neutral.view(words, 32).to(torch.int64) * weights).sum(dim=1)
        # numpy rows: the steering works on a numpy view of vLLM's bitmask row (a torch call costs
        # several microseconds; the same on a numpy array, well under one)
        self.neutral = torch.where(packed >= 1 << 31, packed - (1 << 32), packed).to(torch.int32).numpy()
        self.opening = ~self.neutral  # the tokens that may open something, made once
        # printable ASCII without structure bytes: written inside free text, such a token neither
        # leaves it (no quote, no backslash, no ``<``) nor ends inside a character
        plain = bytes(b for b in range(32, 127) if b not in NON_NEUTRAL)
        self.inert = bytes(bool(data) and not data.translate(None, plain) for data in token_bytes)
        # the token that spells the free-text probe alone, if any: whether the grammar takes the
        # probe then reads off XGrammar's mask (exact per token) instead of a trial on a copy
        probe = self.vocab.tokens(PROBE)
        self.probe = probe[0] if probe is not None and len(probe) == 1 and token_bytes[probe[0]] == PROBE else None

    _lock = threading.Lock()
    _cache: dict[int, BudgetTables] = {}

    @classmethod
    def of(cls, key: int, build: Callable[[], BudgetTables]) -> BudgetTables:
        """One table per tokenizer (``key``: ``id`` of the backend's tokenizer info), built once."""
        with cls._lock:
            tables = cls._cache.get(key)
            if tables is None:
                tables = cls._cache[key] = build()
            return tables


def _bit(token: int) -> int:
    """The int32 word value with only ``token``'s bit set."""
    bit = 1 << (token % 32)
    return bit - (1 << 32) if bit >= 1 << 31 else bit


def _only(row: np.ndarray, token: int) -> None:
    row[:] = 0
    row[token // 32] = _bit(token)


def _with(keep: np.ndarray, tokens: list[int]) -> np.ndarray:
    """``keep`` (a bitmask row) with ``tokens``' bits set too."""
    for token in tokens:
        if token < 32 * keep.shape[0]:
            keep[token // 32] |= _bit(token)
    return keep


def _tokens_of(row: np.ndarray | torch.Tensor, *, at_most: int | None = None) -> list[int] | None:
    """The token ids whose bits are set in a bitmask row (a CPU tensor, as vLLM fills it, or a numpy
    view of one), ascending; None when there are more than ``at_most`` (the caller would not try them
    one by one anyway). Only the words that hold a bit are read, two int32 words at a time where the
    row allows (a 150k-token row holds a few bits at a choice between structures), and their bits are
    listed in Python: numpy's unpacking and selection cost about 30 µs for twenty tokens on a 49k row,
    this about 16."""
    words = np.asarray(row).astype("<i4", copy=False)  # (a view on little-endian machines)
    wide = len(words) % 2 == 0 and words.flags.c_contiguous
    units = words.view("<u8") if wide else words.view("<u4")  # bit i of unit u is token width*u + i
    width = 64 if wide else 32
    held = units.nonzero()[0]
    if at_most is not None and len(held) > at_most:
        return None
    limit = len(words) * 32 if at_most is None else at_most
    out: list[int] = []
    for unit, value in zip(held.tolist(), units[held].tolist(), strict=True):
        base = width * unit
        while value:
            low = value & -value
            out.append(base + low.bit_length() - 1)
            value ^= low
        if len(out) > limit:
            return None
    return out


_SPACE = b" \t\r\n"


def _completes(m: _Matcher, rest: bytes) -> bool:
    """Whether ``rest`` ends the answer from ``m``'s state (``m`` is left as it was)."""
    mark = m.mark()
    try:
        return (not rest or m.accept(rest)) and m.can_stop()
    finally:
        m.back_to(mark)


def _allows(row: np.ndarray | torch.Tensor, token: int) -> bool:
    return bool((int(row[token // 32]) >> (token % 32)) & 1)


#: vLLM's bitmask tensor (allocated once per engine and filled every step) and a numpy view of it.
_ROWS: tuple[torch.Tensor, np.ndarray] | None = None


def _rows(bitmask: torch.Tensor) -> np.ndarray:
    """A numpy view of ``bitmask`` (what is cleared in it is cleared in vLLM's), made once per tensor:
    ``bitmask[idx].numpy()`` each step cost about 3% of the engine core's samples under tools (torch's
    indexing and conversion, several microseconds), a numpy row of the kept view a fifth of a microsecond.
    (One tuple, read and replaced whole: the fill may run on vLLM's fill threads.)"""
    global _ROWS
    held = _ROWS
    if held is None or held[0] is not bitmask:
        held = _ROWS = (bitmask, bitmask.numpy())
    return held[1]


def make_budget_grammar(inner: XgrammarGrammar | GuidanceGrammar, header: BudgetHeader, tables: BudgetTables,
                        stop_ids: list[int]) -> StructuredOutputGrammar:
    """``inner`` (vLLM's XgrammarGrammar or GuidanceGrammar) behind a budget (class built lazily:
    it subclasses vLLM's grammar interface)."""
    return _grammar_class()(inner, header, tables, stop_ids)


_CLASS: type | None = None


def _grammar_class() -> type:
    global _CLASS
    if _CLASS is None:
        from vllm.v1.structured_output.backend_types import StructuredOutputGrammar

        class _Budget(BudgetGrammar, StructuredOutputGrammar):
            pass

        _CLASS = _Budget
    return _CLASS


class BudgetGrammar:
    """Per request: the inner grammar, the tokens taken, and the ending once it is forced."""

    def __init__(self, inner: XgrammarGrammar | GuidanceGrammar, header: BudgetHeader, tables: BudgetTables,
                 stop_ids: list[int]) -> None:
        self.inner = inner
        self.header = header
        self.tables = tables
        self.stop_ids = list(stop_ids)
        self.taken = 0
        self.plan: bytes | None = None  # the forced ending's bytes still to write, once closing
        self._last: int | None = None  # tokens of the last ending worked out
        self._lost = False  # the last look's walk found no ending (see _idle)
        self._looked_at = -_FAR_EVERY
        self._restart: int | None = None  # the shortest whole answer (what starting anew costs)
        self._bytes: bytes | None = None  # the last ending, as bytes, and when it was worked out
        self._bytes_at = -1
        self._walked_at = -1
        self._checked_at = -1  # when the last ending was last shown valid (walked or checked)
        self._last_token: int | None = None
        self._copy: _Matcher | None = None  # this step's copy of the matcher (see _work)
        self._in_text = False  # the last look found the answer inside free text, far from the zone
        self._quoted = False  # ... and a quote leaves that text (a string's content)
        self._zone = 0  # the zone's edge at the last look (tokens left)
        self._closer_bytes = frozenset(b"".join(c.encode() for c in header.closers))
        self._forced = b""  # what the grammar forced at the last look (see _forced_here), and when
        self._forced_at = -1

    # -- vLLM's grammar interface -----------------------------------------------------------
    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        ok = bool(self.inner.accept_tokens(request_id, tokens))
        if ok:
            self.taken += len(tokens)
            self._last_token = tokens[-1] if len(tokens) == 1 else None
            if self.plan is not None:
                written = b"".join(self.tables.token_bytes[t] for t in tokens if t < len(self.tables.token_bytes))
                self.plan = self.plan[len(written):] if self.plan.startswith(written) else None
        return ok

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        return list(self.inner.validate_tokens(tokens))

    def rollback(self, num_tokens: int) -> None:
        self.inner.rollback(num_tokens)
        self.taken = max(0, self.taken - num_tokens)
        self.plan = None
        self._bytes = None
        self._checked_at = self._forced_at = -1
        self._looked_at = -_FAR_EVERY
        self._in_text = False

    def is_terminated(self) -> bool:
        return bool(self.inner.is_terminated())

    def reset(self) -> None:
        self.inner.reset()
        self.taken = 0
        self.plan = None
        self._bytes = None
        self._checked_at = self._forced_at = -1
        self._last = None
        self._looked_at = -_FAR_EVERY
        self._in_text = False

    def fill_bitmask(self, bitmask: torch.Tensor, idx: int) -> None:
        self.inner.fill_bitmask(bitmask, idx)
        if self.inner.is_terminated() or self._idle() or self._still_in_text():
            return  # the common case: nothing to steer, nothing copied
        row = _rows(bitmask)[idx]  # a view: what is cleared here is cleared in vLLM's bitmask
        try:
            self._steer(row)
        except Exception:  # noqa: BLE001 - never worse than the plain grammar: log, restore its mask
            log.exception("budget closing failed; the grammar's own mask stands")
            self.inner.fill_bitmask(bitmask, idx)  # (its mask again: steering only tries things on a copy)
            self.plan = None
            return
        finally:
            self._copy = None
        if not np.count_nonzero(row):  # an empty row would end the request on a refused token
            log.error("budget closing left no token allowed (%d taken of %d); the grammar's own mask stands",
                      self.taken, self.header.max_tokens)
            self.inner.fill_bitmask(bitmask, idx)
            self.plan = None

    # -- the budget ---------------------------------------------------------------------------
    def _work(self) -> _Matcher:
        """This step's copy of the grammar's matcher: every trial of the step is taken on it and
        undone. One copy a step, never one a trial; the live matcher sees no trial (a refused byte
        leaves memory in an XGrammar matcher that each later copy of it would carry)."""
        if self._copy is None:
            inner = self.inner
            if hasattr(inner, "matcher"):
                self._copy = XGrammarBytes(inner.matcher.fork())
            else:
                self._copy = GuidanceBytes(inner.ll_matcher.deep_copy(), self.tables.vocab,
                                           eos=inner.ll_tokenizer.eos_token)
        return self._copy

    def _ending(self, *, look_ahead: bool) -> bytes | None:
        if look_ahead:
            return shortest_completion(self._work(), self.header.closers, look_ahead=True)
        data = self._reused()
        if data is None:
            data = shortest_completion(self._work(), self.header.closers)
            self._walked_at = self._checked_at = self.taken
        self._bytes, self._bytes_at = data, self.taken
        return data

    def _reused(self) -> bytes | None:
        """The last ending, still valid from here, when it was walked at most :data:`_REWALK_EVERY`
        tokens ago: what the model wrote since was its start (then the rest), or content that
        leaves it valid (a string's text). One check instead of a walk: a few microseconds; none
        at all (not even the step's copy of the matcher) where the token written was the start of
        an ending shown valid a step ago: the grammar reads bytes, so the rest ends the answer
        from here as the whole did from there."""
        last = self._bytes
        if last is None or self.taken - self._bytes_at != 1 \
                or (self.taken - self._walked_at > _REWALK_EVERY and not self._zone_far()):
            return None
        written = self._written()
        if written and last.startswith(written):
            rest = last[len(written):]
            if self._checked_at == self.taken - 1:
                self._checked_at = self.taken
                return rest
        else:
            rest = last
        if not _completes(self._work(), rest):
            return None
        self._checked_at = self.taken
        return rest

    def _written(self) -> bytes:
        """The bytes of the one token written since the last step (b"": several, or none known)."""
        token = self._last_token
        return self.tables.token_bytes[token] if token is not None and token < len(self.tables.token_bytes) else b""

    def _zone_far(self) -> bool:
        """Whether the zone is too far for a longer-than-needed ending to change what is allowed: it
        is worked out anew every :data:`_REWALK_EVERY` tokens only nearer than this (a shorter one
        only moves the zone and the close, both far off; a valid one kept meanwhile costs one check).
        Under tools about half the walks were these, most of them far from the end."""
        left = self.header.max_tokens - self.taken
        return left > (self._last or 0) + max(ZONE, self._restart or 0) + 2 * _REWALK_EVERY

    def _count(self, data: bytes) -> int:
        count = self.tables.vocab.count(data)
        return len(data) if count is None else count

    def _first(self, row: np.ndarray, data: bytes) -> int | None:
        """The longest token that starts ``data`` and that the mask allows now (a grammar may allow
        fewer tokens than the bytes they spell: llguidance keeps to forced text's own tokens)."""
        return self.tables.vocab.first(data, lambda token: _allows(row, token))

    def _idle(self) -> bool:
        """Whether this step changes nothing: no ending forced, the last look recent, and the end
        far from it, or that look's walk found no ending at all (the row is then not even copied).
        A walk that finds none is the costliest look (all its steps; a string with a long
        ``minLength`` takes XGrammar tens of microseconds a byte), and the next steps' would find
        none either until the text moved on: every step's walk held the engine 165 ms a token
        (``minLength: 500``, tests/unit/test_budget_grammar.py)."""
        if self.plan is not None or self.taken - self._looked_at >= _FAR_EVERY:
            return False
        if self._lost:  # no ending within the walk's reach: nothing to steer until the next look
            return True
        if self._last is None:
            return False
        left = self.header.max_tokens - self.taken
        return left > max(2 * self._last + 2 * ZONE + (self._restart or 0), self._last + _LOOKOUT) + _FAR_EVERY

    def _still_in_text(self) -> bool:
        """Whether this step would only find what the last look found: the answer inside free text
        (a string's content, a think block) with the zone far, and every token since then inert
        (printable ASCII, no structure byte, and outside a quoted string no byte of a closer), which
        can neither leave the text nor end inside a character. (Inside a string a quote leaves, no
        inert token does: the quote and the backslash are structure bytes. Elsewhere, in a think
        block or an XML value, the closers' bytes still count: a marker may end in letters.) Such
        text leaves the ending as it was (its content does not lengthen what closes it), so the
        step's look would find free text again and steer nothing.
        (A pattern that counts characters could lengthen it by a few; the zone's margin of at
        least :data:`ZONE` tokens covers that until the next look.)
        At most :data:`_REWALK_EVERY` steps go unlooked; the last ending is carried as if reused,
        and the next look checks it."""
        if not self._in_text or self._last_token is None or self.taken - self._looked_at > _REWALK_EVERY:
            return False
        token, inert = self._last_token, self.tables.inert
        if token >= len(inert) or not inert[token] \
                or (not self._quoted and self._closer_bytes.intersection(self.tables.token_bytes[token])) \
                or self.header.max_tokens - self.taken <= self._zone:
            self._in_text = False
            return False
        self._bytes_at = self.taken
        return True

    def _steer(self, row: np.ndarray) -> None:
        self._in_text = False
        left = self.header.max_tokens - self.taken
        if left <= 0:
            return
        if self.plan:
            token = self._first(row, self.plan)
            if token is None:
                log.warning("budget closing: the grammar allows no token of the ending here; not forced")
                self.plan = None
                return
            _only(row, token)
            return
        self._looked_at = self.taken
        ending = self._ending(look_ahead=False)
        self._lost = ending is None
        if ending is None:
            return
        need = self._count(ending)
        if self._restart is None:
            self._restart = need if self.taken == 0 else 0
        self._last = need
        if ending and left <= need + _SLACK:
            shorter = self._ending(look_ahead=True)
            if shorter is not None and self._count(shorter) < need:
                ending = shorter
            token = self._first(row, ending)
            if token is None:
                log.warning("budget closing: the grammar allows no token of the ending here; not forced")
                return
            self.plan = ending
            _only(row, token)
            return
        # within a whole new part's reach of the end (what the shortest answer from the start
        # costs), nothing new is opened: a call, a property, an item begun there would not fit
        zone = need + max(ZONE, self._restart or 0)
        if not ending and left <= zone:
            self._keep_complete(row)
            return
        if left > zone:
            self._zone = zone
            self._ban_what_would_not_fit(row, left, ending)
            return
        # neutral tokens only where the grammar forces nothing (not inside a key name, whose rest a
        # short token would split into more tokens than the ending counted)
        keep = self.tables.neutral[: row.shape[0]].copy() if not self._work().forced() else np.zeros_like(row)
        first = self._first(row, ending)
        row &= _with(keep, self.stop_ids + ([first] if first is not None else []))

    def _ban_what_would_not_fit(self, row: np.ndarray, left: int, ending: bytes) -> None:
        """At a choice between structures (not inside free text, nothing forced), each token that
        opens something (a bracket, a quote, a comma...) is tried on a copy: one whose shortest ending
        would not fit in the tokens left after it is banned. An array item or an optional property
        can cost far more than the whole answer's minimum, so no fixed margin is enough.

        Known completions from here (``ending``, and each trial's token with the ending its walk
        found; shortest tokens first, so ``,`` is walked before ``, "``) spare most walks: a token
        that starts one is kept without a trial when the rest fits with :data:`ZONE` tokens to
        spare (the grammar reads bytes, so the rest completes the answer after it); for any other,
        the rest of a known completion after the token's bytes, spaces aside (after ``" :"``, the
        ``0}`` of a known ``:0}``), is checked on the copy: one accept instead of a walk.
        """
        if self._forced_here():
            return
        if self._takes_probe(row):
            self._in_text = True
            # (only asked where the closers' bytes would matter: a JSON answer has no closers)
            self._quoted = bool(self._closer_bytes) and ending[:1] == b'"' and leaves_free_text(self._work(), b'"')
            return
        token_bytes = self.tables.token_bytes
        known = [ending] if ending else []
        room = left - 1 - ZONE

        def shown_to_fit(token: int) -> bool:
            data = token_bytes[token] if token < len(token_bytes) else b""
            return bool(data) and any(c.startswith(data) and self._count(c[len(data):]) <= room for c in known)

        def fits(trial: _Matcher, token: int) -> bool:
            spelled = token_bytes[token] if token < len(token_bytes) else b""
            data = spelled.strip(_SPACE)
            for c in known:
                at = c.find(data) if data else -1
                if at >= 0 and self._count(rest := c[at + len(data):]) <= room and _completes(trial, rest):
                    return True
            found = shortest_completion(trial, self.header.closers)
            if found is None:
                return False
            if spelled:
                known.append(spelled + found)
            return self._count(found) <= left - 1

        tokens = _tokens_of(row & self.tables.opening[: row.shape[0]], at_most=_TRY_AT_MOST + len(self.stop_ids))
        if tokens is not None:
            tokens.sort(key=lambda t: len(token_bytes[t]) if t < len(token_bytes) else 0)
        self._drop_unless(row, tokens, fits, known=shown_to_fit)

    def _forced_here(self) -> bool:
        """Whether the grammar forces the next bytes: XGrammar's live matcher answers without a
        copy (its jump-forward look changes nothing and leaves no memory, unlike a refused trial).
        Where the token written since the last look spelled the start of what was forced then, the
        rest is forced now (every continuation began with those bytes) and nobody is asked: a call's
        head is forced over many tokens, and XGrammar's look (about 4 µs) was asked at each."""
        written = self._written()
        if self._forced_at == self.taken - 1 and written and len(written) < len(self._forced) \
                and self._forced.startswith(written):
            self._forced, self._forced_at = self._forced[len(written):], self.taken
            return True
        matcher = getattr(self.inner, "matcher", None)
        forced = XGrammarBytes(matcher).forced() if matcher is not None else self._work().forced()
        self._forced, self._forced_at = forced, self.taken
        return bool(forced)

    def _takes_probe(self, row: np.ndarray) -> bool:
        """Whether the grammar takes the free-text probe here (inside a string or a think block):
        read off XGrammar's untouched mask where one token spells the probe."""
        probe = self.tables.probe
        if probe is not None and hasattr(self.inner, "matcher") and probe < 32 * row.shape[0]:
            return _allows(row, probe)
        return self._work().takes(PROBE)

    def _keep_complete(self, row: np.ndarray) -> None:
        """The answer is complete and a new part would not fit: only tokens after which it is
        still complete (whitespace after a JSON document, stop), where they are few enough to
        try one by one; among many (free text), the neutral ones."""
        row &= _with(self.tables.neutral[: row.shape[0]].copy(), self.stop_ids)
        self._drop_unless(row, _tokens_of(row, at_most=_TRY_AT_MOST + len(self.stop_ids)),
                          lambda trial, _token: trial.can_stop())

    def _drop_unless(self, row: np.ndarray, tokens: list[int] | None, keep_if: Callable[[_Matcher, int], bool],
                     *, known: Callable[[int], bool] | None = None) -> None:
        """Clear each of ``tokens`` (stop tokens aside; at most :data:`_TRY_AT_MOST`, else none;
        None: too many to count) whose matcher copy, after it, fails ``keep_if`` (``known``: the
        tokens kept without a trial)."""
        if tokens is None:
            return
        stops = set(self.stop_ids)
        tokens = [t for t in tokens if t not in stops]
        if len(tokens) > _TRY_AT_MOST:
            return
        for token in tokens:
            if known is not None and known(token):
                continue
            m = self._work()
            mark = m.mark()
            try:
                keep = m.accept_token(token) and keep_if(m, token)
            finally:
                m.back_to(mark)
            if not keep:
                row[token // 32] &= ~_bit(token)
