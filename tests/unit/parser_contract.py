"""Shared contract for tool/reasoning parser tests: run a text through MessageStream
non-streamed and streamed (several chunkings), rebuild the message from the deltas with
an independent reconstructor that enforces the OpenAI streaming rules, and compare.
"""
from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from tests.testdata import testdata_root
from server.messages.message_stream import FinalMessage, MessageDelta, MessageStream
from server.messages.openai_message import finish_reason

__all__ = [
    "TESTDATA",
    "load_cases",
    "Rebuilt",
    "Reconstructor",
    "chunkings",
    "run_nonstream",
    "run_stream",
    "same_text",
    "check_agree",
    "checkpoint_checks",
    "ends_within",
]

TESTDATA = testdata_root()


@contextmanager
def ends_within(seconds: int, what: str) -> Iterator[None]:
    """Fail (rather than hang the suite) when the block runs past ``seconds``: a parse that never
    ends would hang the server on that model output."""
    import signal

    def hung(signum: int, frame: Any) -> None:
        raise AssertionError(f"{what} did not end within {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def load_cases(prefixes: Sequence[str]) -> list[dict[str, Any]]:
    """Cases of cases.json whose parser is one of ``prefixes``."""
    data = json.loads((TESTDATA / "parsers" / "cases.json").read_text())
    return [c for c in data["cases"] if c["parser"] in prefixes]


def same_text(a: str | None, b: str | None) -> bool:
    """None and "" are the same (OpenAI's null vs empty content is the server's call)."""
    return (a or "") == (b or "")


@dataclass
class Rebuilt:
    reasoning: str = ""
    content: str = ""
    calls: list[dict[str, str]] = field(default_factory=list)  # id, name, arguments


class Reconstructor:
    """Applies deltas like an OpenAI client would, asserting the streaming rules."""

    def __init__(self, *, markers: Iterable[str] = ()) -> None:
        self.out = Rebuilt()
        self.markers = tuple(m for m in markers if m)
        self._last_index = -1

    def apply(self, delta: MessageDelta | None) -> None:
        if delta is None:
            return
        assert delta.reasoning or delta.content or delta.tool_calls, "empty delta returned"
        for text in (delta.reasoning, delta.content):
            assert text is None or text != "", "empty string delta"
        self.out.reasoning += delta.reasoning or ""
        self.out.content += delta.content or ""
        for d in delta.tool_calls:
            assert d.index >= self._last_index, f"index went back: {d.index} after {self._last_index}"
            if d.index == len(self.out.calls):  # first delta of a new call
                assert d.id and d.id.startswith("call_") and len(d.id) == 29, d.id
                assert d.id[5:].isalnum() and d.id.isascii(), d.id
                assert d.id not in {c["id"] for c in self.out.calls}, "duplicate id"
                assert d.name, "header without a name"
                assert d.arguments == "", "header must carry arguments ''"
                self.out.calls.append({"id": d.id, "name": d.name, "arguments": ""})
            else:
                assert d.index < len(self.out.calls), f"index {d.index} skipped ahead"
                assert d.id is None and d.name is None, "later deltas carry only arguments"
                assert d.arguments, "empty argument fragment"
                self.out.calls[d.index]["arguments"] += d.arguments
            self._last_index = d.index
        for marker in self.markers:
            assert marker not in self.out.content, f"marker {marker!r} in content"
            assert marker not in self.out.reasoning, f"marker {marker!r} in reasoning"


def _random_chunks(text: str, seed: int, most: int) -> list[str]:
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        k = rng.randint(1, most)
        out.append(text[i : i + k])
        i += k
    return out


@lru_cache(maxsize=1)
def _tokenizer() -> Any:
    model_dir = os.environ.get("GRAMSERVE_MODEL_DIR")
    if not model_dir or not Path(model_dir).is_dir():
        try:  # the embedded SmolLM2 (converted once, then cached): real token boundaries
            from server.default_model import ensure_default_model

            model_dir = str(ensure_default_model(progress=False))
        except (ImportError, FileNotFoundError):
            return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def _token_chunks(text: str) -> list[str] | None:
    tok = _tokenizer()
    if tok is None:
        return None
    ids = tok.encode(text, add_special_tokens=False)
    out, prev = [], ""
    for n in range(1, len(ids) + 1):
        now = tok.decode(ids[:n])
        if now.startswith(prev) and not now.endswith("\ufffd"):
            out.append(now[len(prev) :])
            prev = now
    if prev != text:
        return None  # the tokenizer does not round-trip this text
    return [c for c in out if c]


def chunkings(text: str, given: Sequence[str] | None = None) -> dict[str, list[str]]:
    """Ways to cut ``text``: per character (every marker gets split), random sizes with a
    fixed seed, per real SmolLM2 token (``GRAMSERVE_MODEL_DIR`` or the embedded model; otherwise
    small random chunks), and the case's own deltas when it has them."""
    cuts = {
        "chars": list(text),
        "random7": _random_chunks(text, 7, 7),
        "random13": _random_chunks(text, 13, 13),
        "whole": [text] if text else [],
    }
    tokens = _token_chunks(text)
    cuts["tokens" if tokens is not None else "random3"] = tokens or _random_chunks(text, 3, 3)
    if given is not None:
        cuts["given"] = list(given)
    return cuts


StreamFactory = Callable[..., MessageStream]


def run_nonstream(make: StreamFactory, text: str) -> FinalMessage:
    stream = make(streaming=False)
    assert stream.feed(text) is None
    stream.finish()
    return stream.final_message()


def run_stream(make: StreamFactory, chunks: Sequence[str], *, markers: Iterable[str] = ()) -> FinalMessage:
    """Feed chunks, rebuild from deltas, and check the rebuild equals the final message."""
    stream = make()
    rebuilt = Reconstructor(markers=markers)
    for piece in chunks:
        rebuilt.apply(stream.feed(piece))
    rebuilt.apply(stream.finish())
    final = stream.final_message()
    for error in final.errors:  # only a streamed *call* may break; text never retracts
        assert "content would" not in error and "reasoning would" not in error, error
    got = rebuilt.out
    assert got.reasoning == (final.reasoning or ""), (got.reasoning, final.reasoning)
    assert got.content == (final.content or ""), (got.content, final.content)
    assert [(c["id"], c["name"], c["arguments"]) for c in got.calls] == [
        (c.id, c.name, c.arguments) for c in final.tool_calls
    ], "deltas do not add up to the final message"
    return final


def check_agree(a: FinalMessage, b: FinalMessage) -> None:
    """Two runs of the same text give the same message (ids aside) and end the same way: the
    server's one ``finish_reason`` rule, whether or not the engine cut the output."""
    assert same_text(a.reasoning, b.reasoning), (a.reasoning, b.reasoning)
    assert same_text(a.content, b.content), (a.content, b.content)
    assert [(c.name, c.arguments) for c in a.tool_calls] == [
        (c.name, c.arguments) for c in b.tool_calls
    ]
    assert a.dropped == b.dropped
    assert a.unfinished == b.unfinished, (a.unfinished, b.unfinished)
    for length in (False, True):
        assert finish_reason(a, length=length) == finish_reason(b, length=length)


def checkpoint_checks(parser: Any, texts: Iterable[str]) -> int:
    """The checkpoint contract over every prefix pair of ``texts``: what a parse says is settled
    (content, reasoning, calls, errors) is what every longer text's parse starts with, and
    parsing on from the checkpoint gives the rest (streams rely on it to parse only new text).
    Returns how many continuations were checked, so a caller can require that checkpoints came."""
    checked = 0
    for text in texts:
        for k in range(1, len(text) + 1):
            settled = parser.parse(text[:k], final=False)
            cp = settled.checkpoint
            if cp is None:
                continue
            for m in range(k, len(text) + 1):
                for final in (False, True) if m == len(text) else (False,):
                    whole = parser.parse(text[:m], final=final)
                    rest = parser.parse(text[cp.pos : m], final=final, resume=cp.resume)
                    assert whole.content == settled.content[: cp.content] + rest.content, (text[:m], cp)
                    assert whole.reasoning == settled.reasoning[: cp.reasoning] + rest.reasoning, (text[:m], cp)
                    assert whole.tool_calls == settled.tool_calls[: cp.calls] + rest.tool_calls, (text[:m], cp)
                    assert len(whole.errors) == cp.errors + len(rest.errors), (text[:m], cp)
                    checked += 1
    return checked
