"""The shortest way to finish what a grammar has open, in bytes and in tokens: budget-aware closing.

A constrained answer that reaches ``max_tokens`` mid-JSON is useless to a program. The grammar
knows at every step what is still open (a string, an object missing required properties, a
tool call's end marker), so the engine can steer to the shortest valid ending once the tokens
left only just cover it (``server/engine/budget_grammar.py``), and the front end can refuse a
budget too small for any valid answer before generating (``server/structured/budget.py``).

:func:`shortest_completion` walks the grammar matcher one move at a time, and undoes the moves:

1. stop when the grammar may end here;
2. take the text the grammar forces (XGrammar's jump-forward string, llguidance's forced bytes);
3. inside free text (a JSON string, a think block, an XML argument value: the matcher takes
   :data:`PROBE`), leave it by the shortest closer that ends the free text (``"``, then the
   constraint's end markers, then the argument styles' value closers);
4. otherwise the first byte of :data:`ORDER` the grammar takes: closing brackets before commas,
   commas before digits (a number never grows forever), bytes used lately last (so a pattern's
   class is found rather than looped in).

The walk is a heuristic for the *shortest* ending (a greedy choice can miss a shorter branch)
but always a *valid* one: every byte is taken by the grammar itself. It works on any
:class:`ByteMatcher` (XGrammar's and llguidance's adapters are here too: the walk and the
matchers it drives read as one), so it knows no
schema and no family: what is open is what the grammar says is open.
"""
from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from server.json_types import JsonValue

if TYPE_CHECKING:
    import xgrammar as xgr
    from llguidance import LLMatcher

__all__ = ["BUDGET_PREFIX", "ORDER", "PROBE", "STYLE_CLOSERS", "BudgetHeader", "ByteMatcher", "GuidanceBytes", "Vocab",
           "XGrammarBytes",
           "closers_of", "leaves_free_text", "shortest_completion", "split_budget_spec"]

#: A byte string that free text (JSON string content, a think block, an XML value) takes and
#: JSON structure never does: while the matcher takes it, the walk is inside free text.
PROBE = "§".encode()

#: The order single bytes are tried outside free text (and for content inside it).
ORDER: tuple[bytes, ...] = tuple(
    bytes([b]) for b in b'"}],:</0123456789-@.tfn[{aeiosrlcdhmpubgkvwyjxqzAEIOSRTLNCDHMPUBGFKVWYJXQZ_+='
    b'>|()!#$%&*;?^`~\'\\ \n\t')
#: Bytes that close or separate structure (``</`` closes an XML value or tag): always tried first,
#: set aside only when taken three times lately (a loop).
_STRUCTURE = frozenset(ORDER[:7])

#: What ends a free-text argument value in each of XGrammar's argument styles (the rest of the
#: closing tag is then forced). The JSON style's values end with ``"``, tried first anyway.
STYLE_CLOSERS: dict[str, tuple[str, ...]] = {
    "qwen_xml": ("\n</parameter>", "</parameter>"),
    "minimax_xml": ("</parameter>",),
    "minimax_m3_xml": ("]<]minimax[>[</",),
    "deepseek_xml": ("</｜DSML｜parameter>",),
    "deepseek_v4_1_xml": ("</｜DSML｜ parameter>",),
    "glm_xml": ("</arg_value>",),
    "cohere_xml": ("</cofl:value>",),
    "kimi_k3_xml": ("<|close|>",),
    "gemma4": ('<|"|>',),
    "pythonic": ("'",),
}

#: How a budgeted constraint travels to the engine as vLLM's ``grammar``: this prefix, a JSON
#: header line (:class:`BudgetHeader`), then the inner spec. Not a grammar XGrammar can read, so
#: without gramserve's backend in the engine the request fails, never runs unbudgeted.
BUDGET_PREFIX = "%gramserve-budget "


@dataclass(frozen=True)
class BudgetHeader:
    """What the engine needs besides the inner spec: the budget and where free text ends."""

    max_tokens: int
    kind: str  # the inner spec's vLLM option: "json", "json_object", "regex", "grammar", "structural_tag"
    closers: tuple[str, ...] = ()

    def wrap(self, inner_spec: str) -> str:
        head = json.dumps({"max_tokens": self.max_tokens, "kind": self.kind, "closers": list(self.closers)},
                          ensure_ascii=False, separators=(",", ":"))
        return BUDGET_PREFIX + head + "\n" + inner_spec


def split_budget_spec(spec: str) -> tuple[BudgetHeader, str] | None:
    """The header and inner spec of a :meth:`BudgetHeader.wrap` spec, or None for any other."""
    if not isinstance(spec, str) or not spec.startswith(BUDGET_PREFIX):
        return None
    head, _, inner = spec[len(BUDGET_PREFIX):].partition("\n")
    fields = json.loads(head)
    return BudgetHeader(max_tokens=int(fields["max_tokens"]), kind=str(fields["kind"]),
                        closers=tuple(str(c) for c in fields.get("closers", ()))), inner


def closers_of(value: JsonValue, *, styles: Iterable[str] = ()) -> tuple[str, ...]:
    """The strings that may end free text or the answer in a structural tag ``value``: every tag's
    ``end``, every constant text (a section's close), and the value closers of each argument style
    in it (and of ``styles``), shortest first."""
    found: set[str] = set()
    seen_styles = set(styles)

    def walk(node: JsonValue) -> None:
        if isinstance(node, dict):
            end = node.get("end")
            for text in (end if isinstance(end, list) else [end]):
                if isinstance(text, str) and text.strip():
                    found.add(text)
            if node.get("type") == "const_string" and isinstance(const := node.get("value"), str) and const.strip():
                found.add(const)  # a section's or call's closing text
            if isinstance(style := node.get("style"), str):
                seen_styles.add(style)
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(value)
    for style in seen_styles:
        found.update(STYLE_CLOSERS.get(style, ()))
    return tuple(sorted(found, key=lambda s: (len(s.encode()), s)))


class ByteMatcher(Protocol):
    """The grammar matcher as the walk sees it (adapters: XGrammar's and llguidance's).

    Trials are taken and undone (:meth:`mark`, :meth:`back_to`) rather than run on copies: a
    copy costs several times a step, and XGrammar copies grow with every byte a matcher refused
    (about 100 bytes each, never freed), so a walk that copied its own matcher got slower with
    every step. A walk copies a matcher at most once, where it starts.
    """

    def fork(self) -> ByteMatcher: ...

    def accept(self, data: bytes) -> bool:
        """Take ``data`` if the grammar allows all of it (else change nothing)."""

    def takes(self, data: bytes) -> bool:
        """Whether the grammar allows all of ``data`` here (nothing changes)."""

    def take_first(self, options: Iterable[bytes]) -> bytes | None:
        """Take the first of ``options`` the grammar allows and return it (None: none is; nothing
        changes). One call for a run of tries: most are refused (the walk's byte choice)."""

    def mark(self) -> int:
        """A point to come back to with :meth:`back_to` (what was taken so far)."""

    def back_to(self, mark: int) -> None:
        """Undo what was taken since ``mark``."""

    def forced(self) -> bytes:
        """The bytes the grammar forces next (b"" when there is a choice)."""

    def can_stop(self) -> bool:
        """Whether the text so far is a complete answer."""


class _Steps:
    """What both adapters share: the steps taken through the adapter, undone with the matcher's
    own ``rollback`` (XGrammar's counts accepted strings and tokens, llguidance's tokens)."""

    __slots__ = ("m", "steps")

    m: Any
    steps: int

    def mark(self) -> int:
        return self.steps

    def back_to(self, mark: int) -> None:
        if self.steps > mark:
            self.m.rollback(self.steps - mark)
            self.steps = mark


class XGrammarBytes(_Steps):
    """An ``xgrammar.GrammarMatcher`` as a :class:`ByteMatcher` (each accept is one rollback step)."""

    __slots__ = ()

    def __init__(self, matcher: xgr.GrammarMatcher) -> None:
        self.m = matcher
        self.steps = 0

    def fork(self) -> XGrammarBytes:
        return XGrammarBytes(self.m.fork())

    def accept(self, data: bytes) -> bool:
        if self.m.accept_string(data):  # (a refused string changes nothing: XGrammar undoes its bytes)
            self.steps += 1
            return True
        return False

    def takes(self, data: bytes) -> bool:
        if self.m.accept_string(data):
            self.m.rollback(1)
            return True
        return False

    def take_first(self, options: Iterable[bytes]) -> bytes | None:
        # Most tries are refused (0.36 µs each through the matcher's FFI handle, 0.49 through its
        # Python method): the handle's own ``accept_string`` where this xgrammar has one.
        handle = getattr(self.m, "_handle", None)
        accept = getattr(handle, "accept_string", None) or _debug_arg(self.m.accept_string)
        for data in options:
            if accept(data, False):
                self.steps += 1
                return data
        return None

    def forced(self) -> bytes:
        try:
            return str(self.m.find_jump_forward_string()).encode()
        except UnicodeDecodeError:  # forced bytes that end (or start) inside a character
            return b""

    def can_stop(self) -> bool:
        return bool(self.m.is_completed())

    def accept_token(self, token: int) -> bool:
        if self.m.accept_token(token):
            self.steps += 1
            return True
        return False


def _debug_arg(accept: Callable[[bytes], bool]) -> Callable[[bytes, bool], bool]:
    """``GrammarMatcher.accept_string`` called as its FFI handle's is (with a ``debug_print`` flag)."""
    return lambda data, debug_print: accept(data)


class GuidanceBytes(_Steps):
    """An ``llguidance.LLMatcher`` as a byte matcher (bytes go in as the vocabulary's tokens).

    With the tokenizer's ``eos`` token, every check is a ``validate_tokens`` (nothing consumed)
    and the tokens that *complete* the answer are held rather than consumed: llguidance takes 30-80
    µs to consume the token that ends a JSON document, and under 1 µs to validate it followed by
    EOS. A walk ends right there and undoes its steps, so the held tokens are usually never
    consumed; anything that needs the matcher's state after them consumes them first.
    """

    __slots__ = ("vocab", "eos", "_held")

    def __init__(self, matcher: LLMatcher, vocab: Vocab, *, eos: int | None = None) -> None:
        self.m, self.vocab, self.eos = matcher, vocab, eos
        self.steps = 0  # tokens taken through this adapter (held ones included)
        self._held: list[int] | None = None  # taken, ending the answer, not consumed yet

    def _settle(self) -> None:
        held, self._held = self._held, None
        if held and self.m.try_consume_tokens(held) != len(held):  # pragma: no cover - validated before
            raise RuntimeError("llguidance refused tokens it validated")

    def fork(self) -> GuidanceBytes:
        self._settle()
        return GuidanceBytes(self.m.deep_copy(), self.vocab, eos=self.eos)

    def back_to(self, mark: int) -> None:
        if self._held is not None and self.steps > mark:
            self.steps -= len(self._held)
            self._held = None
        super().back_to(mark)

    def accept(self, data: bytes) -> bool:
        tokens = self.vocab.tokens(data)
        if not tokens:
            return not data
        self._settle()
        if self.eos is not None:
            valid = self.m.validate_tokens([*tokens, self.eos])
            if valid < len(tokens):
                return False
            if valid > len(tokens):  # the answer is complete after them: held
                self._held = tokens
                self.steps += len(tokens)
                return True
        taken = self.m.try_consume_tokens(tokens)
        if taken == len(tokens):
            self.steps += taken
            return True
        if taken:
            self.m.rollback(taken)
        return False

    def take_first(self, options: Iterable[bytes]) -> bytes | None:
        return next((data for data in options if self.accept(data)), None)

    def takes(self, data: bytes) -> bool:
        if self.eos is None:
            mark = self.steps
            if self.accept(data):
                self.back_to(mark)
                return True
            return False
        tokens = self.vocab.tokens(data)
        if not tokens:
            return not data
        self._settle()
        return self.m.validate_tokens(tokens) == len(tokens)

    def forced(self) -> bytes:
        self._settle()
        return bytes(self.m.compute_ff_bytes())

    def can_stop(self) -> bool:
        return self._held is not None or bool(self.m.is_accepting())

    def accept_token(self, token: int) -> bool:
        self._settle()
        if self.m.try_consume_tokens([token]) == 1:
            self.steps += 1
            return True
        return False


def _free(m: ByteMatcher) -> bool:
    return m.takes(PROBE)


def leaves_free_text(m: ByteMatcher, closer: bytes) -> bool:
    """Whether ``closer`` (and what it forces) takes ``m`` out of the free text it is in (a quote out of a
    string's content); ``m`` is left as it was."""
    return _closes(m, closer, ends=False)


def _closes(m: ByteMatcher, closer: bytes, *, ends: bool) -> bool:
    """``closer`` (and the text it forces) ends the answer, or with ``ends`` False, at least
    leaves the free text. ``m`` is left as it was."""
    mark = m.mark()
    try:
        if not m.accept(closer):
            return False
        forced = m.forced()
        if forced:
            m.accept(forced)
        return m.can_stop() or (not ends and not _free(m))
    finally:
        m.back_to(mark)


def shortest_completion(matcher: ByteMatcher, closers: Sequence[str] = (), *, max_steps: int = 512,
                        look_ahead: bool = False) -> bytes | None:
    """The bytes that finish ``matcher``'s text as a complete answer (b"" when it may end now),
    or None when the walk finds no ending within ``max_steps`` moves.

    The walk runs on ``matcher`` itself and undoes every step, so its state ends as it began;
    pass a copy of a matcher that is still in use (an XGrammar matcher keeps some memory for each
    byte it refused, and copies it with every fork).

    ``look_ahead``: where the grammar allows several bytes outside free text (which property
    comes next, which branch), try each with a plain walk and keep the shortest. Several times
    the cost; it finds the ending that skips optional properties the byte order would take.
    """
    plain = _walk(matcher, closers, max_steps, None, [max_steps])
    if not look_ahead:
        return plain
    ahead = _walk(matcher, closers, max_steps, plain, [LOOK_AHEAD_WORK])
    return ahead if ahead is not None and (plain is None or len(ahead) < len(plain)) else plain


#: Steps all the walks of one look-ahead may take together (then the plain walk's ending stands).
LOOK_AHEAD_WORK = 3000


def _walk(m: ByteMatcher, closers: Sequence[str], max_steps: int, hint: bytes | None,
          work: list[int]) -> bytes | None:
    """One walk on ``m``, undone before it returns; with a ``hint`` (a plain walk's ending),
    branches are chosen by looking ahead. ``work`` counts down the steps left to every walk of one
    look-ahead (None when spent)."""
    mark = m.mark()
    try:
        return _steps(m, closers, max_steps, hint, work)
    finally:
        m.back_to(mark)


def _steps(m: ByteMatcher, closers: Sequence[str], max_steps: int, hint: bytes | None,
           work: list[int]) -> bytes | None:
    look_ahead = hint is not None
    exits = [b'"'] + [c.encode() for c in closers if c.encode() != b'"']
    out = bytearray()
    recent = _Recent()
    for _ in range(max_steps):
        work[0] -= 1
        if work[0] < 0:
            return None
        if m.can_stop():
            return bytes(out)
        forced = m.forced()
        if forced:
            if not m.accept(forced):
                return None
            out += forced
            continue
        if _free(m):
            step = next((c for c in exits if _closes(m, c, ends=False)), None)
        else:  # a closer that ends the answer here (a calls section's end) beats any byte
            step = next((c for c in exits[1:] if _closes(m, c, ends=True)), None)
        if step is not None:
            m.accept(step)
        else:
            step = _best_branch(m, closers, max_steps, hint or b"", work) if look_ahead else None
            if step is None:
                step = _first_taken(m, recent)
            else:
                m.accept(step)
            if step is None:
                return None
        out += step
        recent.add(step)
    return None


def _best_branch(m: ByteMatcher, closers: Sequence[str], max_steps: int, hint: bytes,
                 work: list[int]) -> bytes | None:
    """Of the bytes the grammar allows here (the first four of ORDER and those of ``hint``, the
    plain walk's ending), the one whose plain walk ends soonest; None when fewer than two are
    allowed (the plain walk decides alone). ``m`` is left as it was."""
    wanted = set(hint)
    allowed: list[bytes] = []
    for byte in ORDER:
        if len(allowed) >= 4 and byte[0] not in wanted:
            continue
        if m.takes(byte):
            allowed.append(byte)
            if len(allowed) == 12:
                break
    if len(allowed) < 2:
        return None
    best: tuple[int, bytes] | None = None
    for byte in allowed:
        mark = m.mark()
        m.accept(byte)
        try:
            rest = _walk(m, closers, max_steps if best is None else best[0], None, work)
        finally:
            m.back_to(mark)
        if rest is not None and (best is None or len(rest) < best[0]):
            best = (len(rest), byte)
    return None if best is None else best[1]


class _Recent:
    """The walk's last 32 steps, with how often each occurs (read per byte tried: a count, not a scan)."""

    __slots__ = ("steps", "counts")

    def __init__(self) -> None:
        self.steps: deque[bytes] = deque()
        self.counts: dict[bytes, int] = {}

    def add(self, step: bytes) -> None:
        steps, counts = self.steps, self.counts
        if len(steps) == 32:
            old = steps.popleft()
            counts[old] -= 1
        steps.append(step)
        counts[step] = counts.get(step, 0) + 1

    def set_aside(self) -> set[bytes]:
        """Content bytes used lately, and structure taken three times lately (a loop)."""
        return {b for b, k in self.counts.items() if k and (b not in _STRUCTURE or k >= 3)}


def _first_taken(m: ByteMatcher, recent: _Recent) -> bytes | None:
    """Take (and return) the first byte of ORDER the grammar allows, bytes not used lately first.
    A refused byte changes nothing, so the second pass tries only the bytes the first set aside."""
    aside = recent.set_aside()
    if not aside:
        return m.take_first(ORDER) or m.take_first(_CONTINUATION)
    return (m.take_first(b for b in ORDER if b not in aside) or m.take_first(b for b in ORDER if b in aside)
            or m.take_first(_CONTINUATION))  # (continuation bytes: inside a multi-byte character)


_CONTINUATION = tuple(bytes([b]) for b in range(0x80, 0xC0))


class Vocab:
    """A tokenizer's byte strings, for writing a completion as tokens (per process, per tokenizer).

    Greedy longest match over the non-special tokens: the bytes are what the grammar took, so
    any tokenization of them is taken too; the longest match keeps the count near the fewest.
    """

    def __init__(self, token_bytes: Sequence[bytes], *, special: Iterable[int] = ()) -> None:
        skip = set(special)
        ids: dict[bytes, int] = {}
        for tid, data in enumerate(token_bytes):
            if data and tid not in skip and data not in ids:
                ids[data] = tid
        self._ids = ids
        self._max = min(64, max((len(k) for k in ids), default=1))
        # endings repeat step after step (the same closing brackets while a string is written):
        # their token counts, remembered (bounded; a lost entry is only counted again)
        self._counts: dict[bytes, int | None] = {}
        self._tokens: dict[bytes, list[int] | None] = {}

    def tokens(self, data: bytes) -> list[int] | None:
        """``data`` as token ids (None when some byte has no token at all). The same short strings
        (single bytes, closers, an ending) come back step after step: remembered, bounded. The list
        is shared: callers do not change it."""
        known = self._tokens
        if data in known:
            return known[data]
        ids = self._ids
        out: list[int] | None = []
        i = 0
        while i < len(data):
            for size in range(min(self._max, len(data) - i), 0, -1):
                tid = ids.get(data[i:i + size])
                if tid is not None:
                    out.append(tid)  # type: ignore[union-attr]
                    i += size
                    break
            else:
                out = None
                break
        if len(data) <= 64:
            if len(known) >= 4096:
                known.clear()
            known[data] = out
        return out

    def first(self, data: bytes, allowed: Callable[[int], bool]) -> int | None:
        """The longest token that spells a start of ``data`` and passes ``allowed`` (None: none)."""
        for size in range(min(self._max, len(data)), 0, -1):
            tid = self._ids.get(data[:size])
            if tid is not None and allowed(tid):
                return tid
        return None

    def count(self, data: bytes) -> int | None:
        """How many tokens :meth:`tokens` writes ``data`` in (None: it cannot)."""
        counts = self._counts
        if data in counts:
            return counts[data]
        tokens = self.tokens(data)
        n = None if tokens is None else len(tokens)
        if len(counts) >= 4096:
            counts.clear()
        counts[data] = n
        return n
