"""The prompts whose greedy answer the e2e tests rely on, and how safe each answer is.

An e2e assertion on the tiny model's exact words holds on every CPU only when, at each step
that produces those words, the first candidate leads the second by much more than the
difference between CPU kernels and dtypes (measured at up to ~0.3 nat in bf16, see
``bench/dtype.py``). This module lists every such prompt (tests import them from here, so a
new one cannot skip the check) and reports, from the float32 reference, the greedy text and
the smallest first-to-second margin over the steps the test relies on.

    .venv/bin/python -m evals.margins      # table; exit status 1 if a margin is under MIN_MARGIN
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Mapping

from evals.reference import Reference, Step

__all__ = ["MIN_MARGIN", "RELIED", "ReliedPrompt", "ends_turn", "margins", "main"]

MIN_MARGIN = 1.0  # nat; bf16 against float32 moved a logprob by <= 0.35 nat here (bench/dtype.py)


@dataclass(frozen=True)
class ReliedPrompt:
    """A chat prompt and the greedy answer (its first ``expect`` characters) a test relies on."""

    messages: tuple[Mapping[str, str], ...]
    expect: str
    used_by: str
    then_stops: bool = False  # a test also relies on the turn ending right after ``expect``

    @property
    def as_messages(self) -> list[dict[str, str]]:
        return [dict(m) for m in self.messages]


RELIED: Mapping[str, ReliedPrompt] = {
    "capital": ReliedPrompt(
        ({"role": "user", "content": "Complete the sentence: The capital of France is"},),
        expect="The capital of France is Paris.",
        used_by="test_chat_api: greedy answer (and its finish_reason stop), stop sequence, logprobs, logit_bias",
        then_stops=True,
    ),
}


def margins(ref: Reference, prompt: ReliedPrompt, *, k: int = 2) -> tuple[str, list[Step]]:
    """The reference's greedy text and its steps up to the one that completes ``prompt.expect``
    (and the end-of-turn step after it when ``then_stops``; all steps if it never gets there).
    The end-of-turn token's text is appended as written, so a caller sees whether it came."""
    steps = ref.greedy(prompt.as_messages, steps=64, k=k)
    text, used, done_at = "", [], None
    for step in steps:
        used.append(step)
        text += step.top[0][0]
        if done_at is None and len(text) >= len(prompt.expect):
            done_at = len(used)
        if done_at is not None and len(used) >= done_at + prompt.then_stops:
            break
    return text, used


def ends_turn(ref: Reference, text: str, prompt: ReliedPrompt) -> bool:
    """Whether the greedy text is ``expect`` followed by exactly an end-of-turn token."""
    rest = text[len(prompt.expect):] if text.startswith(prompt.expect) else None
    return rest in set(ref.tokenizer.all_special_tokens)


def main() -> int:
    from server.default_model import ensure_default_model

    ref = Reference(ensure_default_model(progress=False))
    print("| prompt | greedy text (reference, float32) | expected prefix | steps | min margin | at | ok |")
    print("|---|---|---|---|---|---|---|")
    bad = 0
    for name, prompt in RELIED.items():
        text, steps = margins(ref, prompt)
        worst = min(range(len(steps)), key=lambda i: steps[i].margin)
        ok = text.startswith(prompt.expect) and steps[worst].margin >= MIN_MARGIN and (
            not prompt.then_stops or ends_turn(ref, text, prompt))
        bad += not ok
        print(f"| {name} | {text!r} | {prompt.expect!r} | {len(steps)} | {steps[worst].margin:.2f} "
              f"| {steps[worst].top[0][0]!r} over {steps[worst].top[1][0]!r} | {'yes' if ok else 'NO'} |")
    print(f"\nminimum margin required: {MIN_MARGIN} nat")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
