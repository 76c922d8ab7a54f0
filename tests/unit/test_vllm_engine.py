"""server/engine/vllm_engine.py without an engine: how requests are mapped to vLLM."""
from __future__ import annotations

import json
from typing import Any

import pytest

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
