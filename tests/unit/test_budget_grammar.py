"""server/engine/budget_grammar.py: every answer ends valid inside its budget.

A random writer (``bench/budget_close.py``) takes any token the wrapped grammar allows, as
vLLM's scheduler would feed a model's choice back; it never ends an answer on purpose, so
the closing is what ends them. Budgets sweep from each constraint's minimum upwards.
"""
from __future__ import annotations

import json
import random

import pytest
from jsonschema import Draft202012Validator

from server.engine.budget_plan import closers_of
from server.structured.tool_grammar import tool_call_format, tool_formats
from tests.unit.budget_cases import SCHEMAS, TOOLS, guidance_cases, xgrammar_cases

#: Families whose call format the walk cannot yet end (no floor, no closing: cut as before).
NOT_CLOSED: dict[str, str] = {}


JSON_CASES = xgrammar_cases()


@pytest.fixture(scope="module")
def sim(hf_model_dir):
    from transformers import AutoTokenizer

    from bench.budget_close import Sim

    return Sim(AutoTokenizer.from_pretrained(str(hf_model_dir)))


def test_a_dozen_schemas_are_swept():
    assert len(JSON_CASES) >= 12, sorted(JSON_CASES)


@pytest.mark.parametrize("name", sorted(JSON_CASES))
def test_json_answers_end_valid_at_every_budget(sim, name):
    from bench.budget_close import json_runs

    schema, sent = JSON_CASES[name]
    closed = 0
    for budget, run in json_runs(sim, sent):
        assert len(run.tokens) <= budget
        errors = [e.message for e in Draft202012Validator(schema).iter_errors(json.loads(run.text))]
        assert not errors, (budget, run.text, errors)
        closed += run.finish == "length"
    assert closed, "no answer reached its budget: the sweep never exercised the closing"


@pytest.mark.parametrize("family", sorted(tool_formats()))
def test_required_calls_end_complete_at_every_budget(sim, family):
    """Parallel required calls: the call in progress closes schema-valid, no half call follows."""
    from bench.budget_close import tool_runs
    from tool_parsers import get_tool_parser

    if family in NOT_CLOSED:
        pytest.xfail(NOT_CLOSED[family])
    tools = TOOLS[:2]
    parser = get_tool_parser(family).with_tools(dict(tools))
    for budget, run in tool_runs(sim, family, tools):
        assert len(run.tokens) <= budget
        parsed = parser.parse(run.text, final=True)
        assert parsed.tool_calls and not parsed.errors, (budget, run.text, parsed.errors)
        for call in parsed.tool_calls:
            assert call.complete, (budget, run.text)
            args = json.loads(call.arguments)
            errors = [e.message for e in Draft202012Validator(dict(tools)[call.name]).iter_errors(args)]
            assert not errors, (budget, run.text, errors)


def test_nothing_is_forced_far_from_the_end(sim):
    """Far from its budget, the wrapped grammar's mask is the grammar's own."""
    import xgrammar as xgr

    schema = SCHEMAS["long strings"]
    plain = sim.grammar("json", schema, max_tokens=None)
    wrapped = sim.grammar("json", schema, max_tokens=500)
    a, b = xgr.allocate_token_bitmask(1, sim.vocab_size), xgr.allocate_token_bitmask(1, sim.vocab_size)
    for piece in ['{"title": "', "Hello", " world", '", "body": "', "x"]:
        plain.fill_bitmask(a, 0)
        wrapped.fill_bitmask(b, 0)
        assert bool((a == b).all())
        tokens = sim.tables.vocab.tokens(piece.encode())
        assert plain.accept_tokens("t", tokens) and wrapped.accept_tokens("t", tokens)


GUIDANCE_CASES = guidance_cases()


@pytest.mark.parametrize("name", sorted(GUIDANCE_CASES))
def test_llguidance_answers_end_valid_at_every_budget(sim, name):
    """The same under llguidance, whose mask may allow fewer tokens than the bytes they spell
    (forced text only as its own tokens): each forced token is picked from the live mask."""
    from bench.budget_close import guidance_runs

    schema, sent = GUIDANCE_CASES[name]
    closed = 0
    for budget, run in guidance_runs(sim, sent):
        assert len(run.tokens) <= budget
        errors = [e.message for e in Draft202012Validator(schema).iter_errors(json.loads(run.text))]
        assert not errors, (budget, run.text, errors)
        closed += run.finish == "length"
    assert closed


def test_tokens_of_a_row_and_when_there_are_too_many_to_try() -> None:
    import torch

    from server.engine.budget_grammar import _bit, _tokens_of

    row = torch.zeros(8, dtype=torch.int32)
    for token in (0, 31, 32, 100, 255):
        row[token // 32] |= _bit(token)
    assert _tokens_of(row) == [0, 31, 32, 100, 255]
    assert _tokens_of(row, at_most=5) == [0, 31, 32, 100, 255]
    assert _tokens_of(row, at_most=4) is None  # more tokens than the caller would try
    assert _tokens_of(row[:7]) == [0, 31, 32, 100]  # an odd number of words
    from server.engine.budget_grammar import _allows

    rng = random.Random(7)
    for _ in range(20):
        row = torch.tensor([rng.choice([0, -1, 1 << 30, -(1 << 31), rng.randrange(-(1 << 31), 1 << 31)])
                            for _ in range(50)], dtype=torch.int32)
        assert _tokens_of(row) == [t for t in range(32 * 50) if _allows(row, t)]
        assert _tokens_of(row[1:]) == [t - 32 for t in range(32, 32 * 50) if _allows(row, t)]  # odd, unaligned
    # a 150k-token row with a few bits, as at a choice between structures: only their words are read
    row = torch.zeros(151_936 // 32, dtype=torch.int32)
    chosen = sorted(rng.sample(range(151_936), 9)) + [151_935]
    for token in chosen:
        row[token // 32] |= _bit(token)
    assert _tokens_of(row, at_most=10) == sorted(set(chosen)) and _tokens_of(torch.zeros_like(row)) == []


@pytest.mark.parametrize("fault", ["raises", "empties"])
def test_a_failed_steer_leaves_the_grammars_own_mask(sim, fault, caplog):
    """Steering that fails (or would allow nothing) gives the row back exactly as the request's
    grammar filled it, and drops any forced ending."""
    import xgrammar as xgr

    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    budgeted = sim.grammar("json", schema, max_tokens=6)
    plain = sim.grammar("json", schema, max_tokens=None)
    own, steered = xgr.allocate_token_bitmask(1, sim.vocab_size), xgr.allocate_token_bitmask(1, sim.vocab_size)
    plain.fill_bitmask(own, 0)

    def broken(row):
        if fault == "raises":
            row.zero_()
            raise RuntimeError("steering failed")
        row.zero_()

    budgeted._steer = broken
    budgeted.plan = b"}"
    budgeted.fill_bitmask(steered, 0)
    assert bool((steered == own).all()) and budgeted.plan is None
    assert any("grammar's own mask stands" in r.getMessage() for r in caplog.records)


class _Watched:
    """A live XGrammar matcher that counts what steering does to it."""

    def __init__(self, matcher) -> None:
        self._m = matcher
        self.forks = 0
        self.trials: list[str] = []

    def fork(self):
        self.forks += 1
        return self._m.fork()

    def __getattr__(self, name):
        if name in ("accept_string", "rollback"):
            self.trials.append(name)
        return getattr(self._m, name)


@pytest.mark.parametrize("kind", ["json", "structural_tag"])
def test_steering_copies_the_live_matcher_once_a_step_and_tries_nothing_on_it(sim, kind):
    """Every trial of a step runs on one copy and is undone there: a refused byte leaves memory in
    an XGrammar matcher that each later copy would carry, so the live matcher must see none."""
    from bench.budget_close import simulate

    if kind == "json":
        spec, closers = SCHEMAS["required nested"], ()
    else:
        fmt = tool_formats()["hermes"]
        spec = {"type": "structural_tag", "format": tool_call_format(fmt, TOOLS[:2], mode="required", parallel=True)}
        closers = closers_of(spec, styles=[fmt.arguments_style])
    for budget in (24, 40, 64):
        grammar = sim.grammar(kind, spec, max_tokens=budget, closers=closers)
        watched = grammar.inner.matcher = _Watched(grammar.inner.matcher)
        calls = 0
        fill = grammar.fill_bitmask

        def counted(bitmask, idx, fill=fill):
            nonlocal calls
            calls += 1
            fill(bitmask, idx)

        grammar.fill_bitmask = counted
        run = simulate(sim, grammar, max_tokens=budget, rng=random.Random(budget), p_stop=0.02)
        assert grammar.taken == len(run.tokens)
        assert 0 < watched.forks <= calls, (budget, watched.forks, calls)
        assert watched.trials == [], budget


def _maker(sim, kind: str, schema, *, family: str, tools):
    """``make(budget)``: a budgeted grammar for ``schema`` (``kind`` json or llguidance), else for
    required calls to ``tools`` in ``family``'s format."""
    from bench.budget_close import required_calls

    if kind not in ("json", "llguidance"):
        spec, closers = required_calls(family, tools)

    def make(budget: int):
        if kind == "llguidance":
            return sim.guidance_grammar(schema, max_tokens=budget)
        if kind == "json":
            return sim.grammar("json", schema, max_tokens=budget)
        return sim.grammar("structural_tag", spec, max_tokens=budget, closers=closers)

    return make


@pytest.mark.parametrize("kind", ["json", "qwen3_coder", "hermes", "llguidance"])
def test_steps_inside_free_text_skip_the_look_and_change_no_mask(sim, kind):
    """A step after an inert token inside free text is not looked at (``_still_in_text``): the
    masks are the same, token for token, as those of a grammar that looks at every step, and
    some steps were skipped. qwen3_coder: free-text XML values, closed by ``</parameter>``; hermes:
    a JSON string argument, whose call markers (``<tool_call>``...) share letters with any word."""
    import xgrammar as xgr

    from bench.budget_close import NOTE_TOOL, simulate

    make = _maker(sim, kind, SCHEMAS["long strings"], family=kind, tools=[NOTE_TOOL])
    skipped = lettered = 0
    for budget in (48, 96):
        run = simulate(sim, make(budget), max_tokens=budget, rng=random.Random(budget), p_stop=0.0,
                       pick=lambda choices, rng: rng.choice([t for t in choices if sim.token_bytes[t].isalpha()]
                                                            or [t for t in choices if sim.token_bytes[t].strip()]
                                                            or choices))
        skipping, looking = make(budget), make(budget)
        looking._still_in_text = lambda: False
        still = skipping._still_in_text

        def counted(g=skipping, still=still) -> bool:
            nonlocal skipped, lettered
            skips = still()
            skipped += skips
            lettered += skips and bool(g._closer_bytes.intersection(sim.token_bytes[g._last_token]))
            return skips

        skipping._still_in_text = counted
        masks = [xgr.allocate_token_bitmask(1, sim.vocab_size) for _ in range(2)]
        for step, token in enumerate(run.tokens):
            for grammar, mask in zip((skipping, looking), masks, strict=True):
                grammar.fill_bitmask(mask, 0)
            assert bool((masks[0] == masks[1]).all()), (kind, budget, step)
            for grammar in (skipping, looking):
                assert grammar.accept_tokens("t", [token])
    assert skipped, "no step was skipped: the test does not reach free text"
    if kind == "hermes":  # inside a string a word that shares a letter with a call marker skips too
        assert lettered, "no step after a token holding a closer's byte was skipped inside the string"


@pytest.mark.parametrize("kind", ["json", "structural_tag", "llguidance"])
def test_the_steps_shortcuts_change_no_mask(sim, kind):
    """Three shortcuts of a step against a grammar that takes none of them, mask for mask on the
    same tokens: an ending kept (not walked again every few tokens) while the zone is far
    (``_zone_far``); the rest of what the grammar forced a step ago taken as forced without asking
    (``_forced_here``); vLLM's bitmask read through a numpy view kept per tensor (``_rows``), here
    with the two grammars' masks alternating so that the kept view changes every fill. Each
    shortcut is taken at least once."""
    import xgrammar as xgr

    from bench.budget_close import simulate
    from server.engine.budget_plan import XGrammarBytes

    make = _maker(sim, kind, SCHEMAS["required nested"], family="hermes", tools=TOOLS[:2])
    taken = {"kept": 0, "forced": 0}
    for budget in (32, 64, 128):
        run = simulate(sim, make(budget), max_tokens=budget, rng=random.Random(budget), p_stop=0.0)
        short, plain = make(budget), make(budget)
        plain._zone_far = lambda: False

        def asked(g=plain) -> bool:
            matcher = getattr(g.inner, "matcher", None)
            return bool((XGrammarBytes(matcher) if matcher is not None else g._work()).forced())

        plain._forced_here = asked
        far, forced_here = short._zone_far, short._forced_here

        def counted_far(g=short, far=far) -> bool:
            is_far = far()
            taken["kept"] += is_far and g.taken - g._walked_at > 8
            return is_far

        def counted_forced(g=short, forced_here=forced_here) -> bool:
            written = sim.token_bytes[g._last_token] if g._last_token is not None else b""
            taken["forced"] += (g._forced_at == g.taken - 1 and 0 < len(written) < len(g._forced)
                                and g._forced.startswith(written))  # (the rest of a forced string)
            return forced_here()

        short._zone_far, short._forced_here = counted_far, counted_forced
        for step, token in enumerate(run.tokens):
            masks = [xgr.allocate_token_bitmask(1, sim.vocab_size) for _ in range(2)]  # new tensors each step
            for grammar, mask in zip((short, plain), masks, strict=True):
                grammar.fill_bitmask(mask, 0)
            assert bool((masks[0] == masks[1]).all()), (kind, budget, step)
            for grammar in (short, plain):
                assert grammar.accept_tokens("t", [token])
    assert taken["kept"] and taken["forced"], taken


def test_a_look_that_finds_no_ending_is_not_repeated_every_step(sim, monkeypatch):
    """Where the shortest ending lies beyond the walk's reach (a string whose ``minLength`` is longer
    than the walk's steps), the walk finds none, and steering does nothing; it is walked again every
    16th step, not every step (each such walk takes XGrammar tens of milliseconds with a long
    ``minLength``, and held the engine that long every token). The masks are the plain grammar's."""
    import xgrammar as xgr

    from bench.budget_close import required_calls, simulate
    from server.engine import budget_grammar

    tool = ("write_file", {"type": "object", "properties": {
        "path": {"type": "string"}, "content": {"type": "string", "minLength": 600}}, "required": ["path", "content"]})
    spec, closers = required_calls("hermes", [tool])
    walks: list[bytes | None] = []
    walk = budget_grammar.shortest_completion

    def counted(*args, **kwargs):
        walks.append(found := walk(*args, **kwargs))
        return found

    monkeypatch.setattr(budget_grammar, "shortest_completion", counted)
    budget = 48
    words = {t for t, b in enumerate(sim.token_bytes) if b.isalpha()}
    run = simulate(sim, sim.grammar("structural_tag", spec, max_tokens=budget, closers=closers), max_tokens=budget,
                   rng=random.Random(3), p_stop=0.0,
                   pick=lambda choices, rng: rng.choice([t for t in choices if t in words] or choices))
    assert len(run.tokens) == budget and walks and all(found is None for found in walks)
    assert len(walks) <= budget // 16 + 1, len(walks)
    budgeted, plain = sim.grammar("structural_tag", spec, max_tokens=budget, closers=closers), \
        sim.grammar("structural_tag", spec, max_tokens=None)
    masks = [xgr.allocate_token_bitmask(1, sim.vocab_size) for _ in range(2)]
    for step, token in enumerate(run.tokens):
        for grammar, mask in zip((budgeted, plain), masks, strict=True):
            grammar.fill_bitmask(mask, 0)
            assert grammar.accept_tokens("t", [token])
        assert bool((masks[0] == masks[1]).all()), step
