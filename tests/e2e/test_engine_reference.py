"""The engine against a float32 reference: transformers on the same converted model folder.

Catches a broken conversion, a wrong dtype or a CPU kernel problem on whichever machine runs
the suite: for a fixed prompt set (``evals.reference.ENGINE_PROMPTS``), each greedy step's top-5
logprobs must lie within ``TOL`` of the reference's, the first choice must be the reference's
wherever the reference margin is wider than ``2 * TOL``, and candidates whose reference gap is
wider than ``2 * TOL`` must keep their order. ``TOL`` is measured, not guessed (README, "CPU
dtype"; ``python -m bench.dtype``). The second test keeps every prompt the e2e tests rely on for
exact words at a margin no CPU's rounding can flip (``evals.margins``).
"""
from __future__ import annotations

import pytest

from evals.margins import MIN_MARGIN, RELIED, ends_turn, margins
from evals.reference import ENGINE_PROMPTS, Agreement, Reference, compare_logprobs

pytestmark = pytest.mark.e2e

STEPS = 16  # greedy steps compared per prompt
# |engine - reference| logprob bound for the default CPU dtype (float32). Measured on a Xeon
# with AMX: float32 max 0.00005 nat over 78 steps x 5 candidates (this test), bf16 (opt-in,
# `--dtype bfloat16`) max 0.376 (bench.dtype); so a bf16 engine, or anything worse, fails here.
TOL = 0.05


@pytest.fixture(scope="module")
def reference() -> Reference:
    from server.default_model import ensure_default_model

    return Reference(ensure_default_model(progress=False))


def test_engine_logprobs_match_the_float32_reference(http, model, reference):
    agr = Agreement()
    for name, messages in ENGINE_PROMPTS.items():
        r = http.post("/v1/chat/completions", json={"model": model, "messages": messages, "temperature": 0,
                                                    "max_tokens": STEPS, "logprobs": True, "top_logprobs": 5})
        assert r.status_code == 200, r.text
        body = r.json()
        # same prompt ids on both sides, or the comparison means nothing
        assert body["usage"]["prompt_tokens"] == len(reference.prompt_ids(messages)), name
        compare_logprobs(reference, messages, body["choices"][0]["logprobs"]["content"], tol=TOL,
                         agreement=agr, label=name)
    print(f"\n[engine-reference] {agr.steps} steps, top-1 {agr.top1_agree}/{agr.steps}, ordered pairs "
          f"{agr.order_agree}/{agr.order_checked}, |diff| mean {agr.mean_abs:.5f} max {agr.max_abs:.5f} (tol {TOL})")
    assert agr.steps >= 4 * len(ENGINE_PROMPTS), "too few steps compared: answers ended at once"
    assert len(agr.abs_diffs) >= 3 * agr.steps and agr.order_checked > 0
    assert not agr.failures, "\n".join(agr.failures[:20])


@pytest.mark.parametrize("name", sorted(RELIED))
def test_relied_prompts_have_wide_margins(reference, name):
    prompt = RELIED[name]
    text, steps = margins(reference, prompt)
    assert text.startswith(prompt.expect), (name, text)
    assert not prompt.then_stops or ends_turn(reference, text, prompt), (name, text)
    worst = min(step.margin for step in steps)
    assert worst >= MIN_MARGIN, f"{name}: a greedy step leads by only {worst:.2f} nat (< {MIN_MARGIN})"
