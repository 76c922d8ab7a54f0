"""The engine's reference: Hugging Face transformers in float32 on the same converted model.

Why: a broken conversion, a wrong dtype or a CPU kernel problem shows first as logprobs that
drift from a plain float32 forward pass. This module computes that reference (greedy paths,
top-k logprobs, the margin between the first two candidates) and compares an OpenAI-style
``logprobs.content`` list against it. The e2e engine check (``tests/e2e/test_engine_reference.py``),
the margin report (``python -m evals.margins``) and the dtype measurement (``bench/dtype.py``)
all use it, so the three read one set of numbers.

Prompts are rendered by the server's own template code and tokenised without added special
tokens, which is what the server does for plain text; the e2e check also compares
``usage.prompt_tokens`` with the reference's prompt length to prove it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = [
    "ENGINE_PROMPTS",
    "Agreement",
    "Reference",
    "Step",
    "compare_logprobs",
]

# The engine check's fixed prompt set: plain questions of several kinds (facts, arithmetic,
# code, a list, a greeting); short, so the reference runs in seconds.
ENGINE_PROMPTS: Mapping[str, list[dict[str, str]]] = {
    "capital": [{"role": "user", "content": "Complete the sentence: The capital of France is"}],
    "greeting": [{"role": "user", "content": "Hi!"}],
    "arithmetic": [{"role": "user", "content": "What is 2 + 2?"}],
    "code": [{"role": "user", "content": "Write a Python function that adds two numbers."}],
    "list": [{"role": "user", "content": "Name three colours."}],
    "system": [{"role": "system", "content": "You answer in one short English sentence."},
               {"role": "user", "content": "What is the largest ocean?"}],
}


@dataclass(frozen=True)
class Step:
    """One decoding step of the reference: the candidates, best first, as (text, logprob)."""

    top: tuple[tuple[str, float], ...]

    @property
    def margin(self) -> float:
        """Logprob gap between the first two candidates (how safe the greedy choice is)."""
        return self.top[0][1] - self.top[1][1] if len(self.top) > 1 else math.inf


@dataclass
class Agreement:
    """How an engine's logprobs agree with the reference, over every compared step."""

    steps: int = 0
    top1_agree: int = 0
    order_checked: int = 0  # adjacent candidate pairs whose reference gap is wider than 2 x tol
    order_agree: int = 0
    abs_diffs: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def max_abs(self) -> float:
        return max(self.abs_diffs, default=0.0)

    @property
    def mean_abs(self) -> float:
        return sum(self.abs_diffs) / len(self.abs_diffs) if self.abs_diffs else 0.0


class Reference:
    """A float32 transformers model and the server's template renderer. Per process: load once."""

    def __init__(self, model_dir: Path | str, *, template: str = "hermes") -> None:
        import torch
        import transformers

        from server.chat.render import ChatRenderer

        self._torch = torch
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            str(model_dir), dtype=torch.float32).eval()
        self.renderer = ChatRenderer.from_model(model_dir_or_tokenizer=Path(model_dir), default=template)
        self._by_text = self._token_table()

    def _token_table(self) -> dict[str, int | None]:
        """Decoded text -> token id; None where two ids decode to the same text (ambiguous)."""
        table: dict[str, int | None] = {}
        for ident in range(len(self.tokenizer)):
            text = self.tokenizer.decode([ident])
            table[text] = None if text in table else ident
        return table

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        text = self.renderer.render([dict(m) for m in messages])
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _logprobs(self, ids: Sequence[int]) -> Any:
        torch = self._torch
        with torch.no_grad():
            logits = self.model(torch.tensor([list(ids)])).logits[0, -1].float()
        return torch.log_softmax(logits, -1)

    def _top(self, logprobs: Any, k: int) -> Step:
        values, idents = logprobs.topk(k)
        return Step(tuple((self.tokenizer.decode([int(i)]), float(v)) for i, v in zip(idents, values)))

    def greedy(self, messages: Sequence[Mapping[str, Any]], *, steps: int, k: int = 5) -> list[Step]:
        """The reference's own greedy path, stopping after an end-of-turn token."""
        ids = self.prompt_ids(messages)
        out: list[Step] = []
        eos = set(self.tokenizer.all_special_ids)
        for _ in range(steps):
            lp = self._logprobs(ids)
            out.append(self._top(lp, k))
            best = int(lp.argmax())
            if best in eos:
                break
            ids.append(best)
        return out

    def along(self, messages: Sequence[Mapping[str, Any]], tokens: Sequence[str]) -> list[Any]:
        """Full logprob vectors at each step of a given path (the engine's chosen tokens), from
        one forward pass over the prompt and the path.

        Stops early where a chosen token's text maps to no single id (the rest cannot be fed).
        """
        torch = self._torch
        prompt = self.prompt_ids(messages)
        path: list[int] = []
        for text in tokens[:-1]:  # the last chosen token is never fed
            ident = self._by_text.get(text)
            if ident is None:
                break
            path.append(ident)
        with torch.no_grad():
            logits = self.model(torch.tensor([prompt + path])).logits[0].float()
        lp = torch.log_softmax(logits[len(prompt) - 1:], -1)
        return [lp[i] for i in range(min(len(tokens), len(path) + 1))]

    def logprob_of(self, vector: Any, text: str) -> float | None:
        ident = self._by_text.get(text)
        return None if ident is None else float(vector[ident])

    def top_of(self, vector: Any, k: int) -> Step:
        return self._top(vector, k)


def compare_logprobs(ref: Reference, messages: Sequence[Mapping[str, Any]],
                     content: Sequence[Mapping[str, Any]], *, tol: float,
                     agreement: Agreement | None = None, label: str = "") -> Agreement:
    """Compare one answer's ``logprobs.content`` (dicts: token, logprob, top_logprobs) with the
    reference along the same path.

    Per step: every engine candidate's logprob within ``tol`` of the reference's; the engine's
    first candidate is the reference's first wherever the reference margin exceeds ``2 * tol``;
    and each adjacent pair of the engine's candidates is in the reference's order wherever the
    reference gap between them exceeds ``2 * tol`` (a nearer pair may swap within tolerance).
    """
    agr = agreement if agreement is not None else Agreement()
    vectors = ref.along(messages, [item["token"] for item in content])
    for n, (item, vector) in enumerate(zip(content, vectors)):
        where = f"{label} step {n}"
        cands = [(c["token"], c["logprob"]) for c in item["top_logprobs"]]
        ref_step = ref.top_of(vector, max(2, len(cands)))
        agr.steps += 1
        if cands and cands[0][0] == ref_step.top[0][0]:
            agr.top1_agree += 1
        elif ref_step.margin > 2 * tol:
            agr.failures.append(f"{where}: engine top-1 {cands[0][0]!r}, reference {ref_step.top[0][0]!r} "
                                f"(reference margin {ref_step.margin:.2f})")
        ref_lps = [ref.logprob_of(vector, text) for text, _ in cands]
        for (text, lp), ref_lp in zip(cands, ref_lps):
            if ref_lp is None:
                continue  # ambiguous text: two ids decode to it
            diff = abs(lp - ref_lp)
            agr.abs_diffs.append(diff)
            if diff > tol:
                agr.failures.append(f"{where}: {text!r} engine {lp:.3f}, reference {ref_lp:.3f} (|diff| {diff:.3f} > {tol})")
        for (a, ra), (b, rb) in zip(zip(cands, ref_lps), zip(cands[1:], ref_lps[1:])):
            if ra is None or rb is None or abs(ra - rb) <= 2 * tol:
                continue
            agr.order_checked += 1
            if ra > rb:
                agr.order_agree += 1
            else:
                agr.failures.append(f"{where}: engine ranks {a[0]!r} above {b[0]!r}, reference "
                                    f"{ra:.3f} < {rb:.3f}")
    return agr
