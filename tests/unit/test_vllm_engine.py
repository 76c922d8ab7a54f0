"""server/engine/vllm_engine.py without an engine: how requests are mapped to vLLM, and how its
outputs come back as :class:`TokenChunk`s (over a scripted ``AsyncLLM``)."""
from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace as NS
from typing import Any

import pytest

from server.engine.base import EngineAbortedError, Sampling, TokenChunk

pytest.importorskip("vllm")


def test_vllms_grammar_check_runs_once_per_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM rebuilds each request's grammar to validate it; a spec that passed is remembered."""
    import xgrammar as xgr
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.structured_output import backend_xgrammar

    from server.engine.vllm_engine import remember_validated_grammars

    monkeypatch.setattr(backend_xgrammar, "validate_xgrammar_grammar", backend_xgrammar.validate_xgrammar_grammar)
    builds: list[str] = []
    for name in ("from_structural_tag", "from_json_schema"):
        real = getattr(xgr.Grammar, name)
        monkeypatch.setattr(xgr.Grammar, name, staticmethod(lambda *a, _real=real, _n=name, **k: (builds.append(_n), _real(*a, **k))[1]))
    remember_validated_grammars()
    remember_validated_grammars()  # installing twice wraps once
    validate = backend_xgrammar.validate_xgrammar_grammar

    def params(**so: Any) -> Any:
        return SamplingParams(max_tokens=4, structured_outputs=StructuredOutputsParams(**so))

    tag = json.dumps({"type": "structural_tag", "format": {"type": "const_string", "value": "x"}})
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    for _ in range(3):
        validate(params(structural_tag=tag))
        validate(params(json=schema))
    assert builds == ["from_structural_tag", "from_json_schema"]
    bad = json.dumps({"type": "structural_tag", "format": {"type": "no_such_format"}})
    for _ in range(2):  # a spec that fails is checked (and refused) every time
        with pytest.raises(Exception):  # noqa: B017 - vLLM raises xgrammar's error type here
            validate(params(structural_tag=bad))
    assert builds.count("from_structural_tag") == 3
    choice = params(choice=["a", "b"])
    validate(choice)  # rewritten into a grammar by the check: never skipped
    assert choice.structured_outputs.grammar and not choice.structured_outputs.choice


# ---------------------------------------------------------------- outputs to chunks

def _engine(outputs: list[Any]) -> Any:
    from server.engine.vllm_engine import ValidatedParams, VllmEngine

    engine = object.__new__(VllmEngine)  # no AsyncLLM: only the mapping of its outputs is exercised
    engine._break_loops = False
    engine._validated = ValidatedParams()
    engine._llm = _ScriptedLLM(outputs)
    return engine


def _out(*choices: tuple[int, str, int, str | None], prompt: int = 3, queued: float | None = None) -> Any:
    metrics = NS(queued_ts=queued, scheduled_ts=None if queued is None else queued + 0.25)
    return NS(outputs=[NS(index=i, text=t, token_ids=list(range(k)), finish_reason=f, logprobs=None)
                       for i, t, k, f in choices],
              prompt_token_ids=list(range(prompt)), metrics=metrics)


class _ScriptedLLM:
    def __init__(self, outputs: list[Any]) -> None:
        self.outputs = outputs
        self.params: Any = None

    async def generate(self, prompt: Any, params: Any, request_id: str) -> Any:
        self.params = params
        for out in self.outputs:
            yield out


def _chunks(outputs: list[Any], sampling: Any) -> list[Any]:
    from server.engine.base import GenerateRequest

    engine = _engine(outputs)

    async def run() -> list[Any]:
        return [c async for c in engine.generate(GenerateRequest("r", [1, 2, 3], sampling))]

    return asyncio.run(run())


def test_one_choice_maps_every_output_in_order() -> None:
    outs = [_out((0, "Hel", 1, None), queued=10.0), _out((0, "lo", 1, None)), _out((0, "", 0, None)),
            _out((0, " you", 2, None)), _out((0, "!", 1, "length"))]
    got = _chunks(outs, Sampling(max_tokens=5))
    assert got == [TokenChunk(0, "Hel", 1, None, (), prompt_tokens=3, queue_seconds=0.25),
                   TokenChunk(0, "lo", 1), TokenChunk(0, "", 0), TokenChunk(0, " you", 2),
                   TokenChunk(0, "!", 1, "length")]


def test_a_stop_of_any_kind_is_stop_and_an_abort_raises() -> None:
    got = _chunks([_out((0, "a", 1, None)), _out((0, "b", 1, "stop_token"))], Sampling(max_tokens=5))
    assert [c.finish_reason for c in got] == [None, "stop"]
    with pytest.raises(EngineAbortedError):
        _chunks([_out((0, "a", 1, None)), _out((0, "", 0, "abort"))], Sampling(max_tokens=5))


def test_greedy_choices_are_copied_to_every_index() -> None:
    outs = [_out((0, "a", 1, None)), _out((0, "b", 1, None)), _out((0, "c", 1, "stop"))]
    got = _chunks(outs, Sampling(max_tokens=5, n=2, temperature=0.0))
    assert [(c.index, c.text, c.prompt_tokens, c.finish_reason) for c in got] == [
        (0, "a", 3, None), (1, "a", 3, None), (0, "b", 0, None), (1, "b", 0, None),
        (0, "c", 0, "stop"), (1, "c", 0, "stop")]


def test_sampled_choices_each_report_the_prompt_once() -> None:
    outs = [_out((0, "a", 1, None)), _out((1, "x", 1, None)), _out((0, "b", 1, None), (1, "y", 1, "stop")),
            _out((0, "c", 1, "length"))]
    got = _chunks(outs, Sampling(max_tokens=5, n=2, temperature=1.0))
    assert [(c.index, c.text, c.prompt_tokens, c.finish_reason) for c in got] == [
        (0, "a", 3, None), (1, "x", 3, None), (0, "b", 0, None), (1, "y", 0, "stop"), (0, "c", 0, "length")]


def test_sampling_params_are_made_per_request_and_not_deep_copied_again() -> None:
    """vLLM deep-copies a request's SamplingParams unless told they are its own (as its server does)."""
    from server.engine.base import GenerateRequest

    engine = _engine([])
    sampling = Sampling(max_tokens=5, temperature=0.5)
    first = engine._sampling_params(GenerateRequest("a", [1], sampling))
    second = engine._sampling_params(GenerateRequest("b", [1], sampling))
    assert first is not second and first.skip_clone and second.skip_clone
    assert first.clone() is not first and first.clone().max_tokens == 5  # (a shallow copy now)


def test_validated_params_are_generated_once_and_only_for_that_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """``validate`` builds a request's params; ``generate`` of the same request object sends those
    (not a second build), once; any other request (same id, new object) builds its own."""
    import gc

    from server.engine.base import GenerateRequest
    from server.engine.vllm_engine import ValidatedParams

    engine = _engine([_out((0, "a", 1, "stop"))])
    builds: list[str] = []
    real = engine._sampling_params
    monkeypatch.setattr(engine, "_sampling_params", lambda req: (builds.append(req.request_id), real(req))[1])

    async def run(req: GenerateRequest) -> Any:
        [c async for c in engine.generate(req)]
        return engine._llm.params

    req = GenerateRequest("r", [1], Sampling(max_tokens=5, temperature=0.5))
    engine.validate(req)
    validated = engine._validated._items["r"][1]
    assert asyncio.run(run(req)) is validated and builds == ["r"] and len(engine._validated) == 0
    assert asyncio.run(run(req)) is not validated and builds == ["r", "r"]  # once only: vLLM keeps and changes it
    engine.validate(req)
    other = GenerateRequest("r", [1], Sampling(max_tokens=7, temperature=0.5))  # same id, another request
    assert asyncio.run(run(other)).max_tokens == 7 and len(engine._validated) == 0
    engine.validate(GenerateRequest("gone", [1], Sampling(max_tokens=5)))  # validated, never generated
    gc.collect()
    assert engine._validated.take(GenerateRequest("gone", [1], Sampling(max_tokens=5))) is None
    for k in range(ValidatedParams.MAX_ENTRIES + 10):  # bounded: oldest out first
        engine.validate(GenerateRequest(f"k{k}", [1], Sampling(max_tokens=5)))
    assert len(engine._validated) == ValidatedParams.MAX_ENTRIES and "k0" not in engine._validated._items
