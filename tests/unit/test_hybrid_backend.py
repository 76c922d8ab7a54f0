"""server/engine/hybrid_backend.py: an llguidance schema is built once, and each request gets its own copy."""
from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from server.engine.hybrid_backend import guidance_grammar_text, hybrid_backend_class
from server.lru import BoundedLRU

SCHEMA = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                     "required": ["a"], "additionalProperties": False}, separators=(",", ":"))


class _Guidance:
    """vLLM's GuidanceBackend as the hybrid backend uses it (its ``compile_grammar``, counted)."""

    def __init__(self, tokenizer: Any) -> None:
        import llguidance.hf

        self.vocab_size = len(tokenizer)
        self.ll_tokenizer = llguidance.hf.from_tokenizer(tokenizer, self.vocab_size)
        self.compiles = 0

    def compile_grammar(self, request_type: Any, spec: str) -> Any:
        import llguidance as llg
        from vllm.v1.structured_output.backend_guidance import GuidanceGrammar

        self.compiles += 1
        grammar = llg.LLMatcher.grammar_from_json_schema(spec, defaults={"whitespace_flexible": False})
        out = GuidanceGrammar(ll_matcher=llg.LLMatcher(self.ll_tokenizer, grammar), ll_tokenizer=self.ll_tokenizer,
                              vocab_size=self.vocab_size)
        out.check_error()
        return out


@pytest.fixture
def backend(hf_model_dir) -> Any:
    from transformers import AutoTokenizer

    cls = hybrid_backend_class()
    made = object.__new__(cls)  # (no engine: only the llguidance path is driven)
    made._guidance = _Guidance(AutoTokenizer.from_pretrained(str(hf_model_dir)))
    made._guidance_lock = threading.Lock()
    made._templates = BoundedLRU(max_entries=4)
    return made


def _mask(grammar: Any) -> bytes:
    import llguidance.torch as llt

    bitmask = llt.allocate_token_bitmask(1, grammar.ll_tokenizer.vocab_size)
    grammar.fill_bitmask(bitmask, 0)
    return bitmask.numpy().tobytes()


def test_a_schema_is_built_once_and_each_request_gets_a_fresh_copy(backend):
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    spec = guidance_grammar_text(SCHEMA)
    first = backend.compile_grammar(StructuredOutputOptions.GRAMMAR, spec)
    fresh = _mask(first)
    tokens = backend._guidance.ll_tokenizer.tokenize_str('{"a":1')
    assert first.accept_tokens("r1", tokens)
    second = backend.compile_grammar(StructuredOutputOptions.GRAMMAR, spec)
    assert backend._guidance.compiles == 1  # the second is a copy of the kept matcher
    assert second.ll_matcher is not first.ll_matcher
    assert _mask(second) == fresh  # untouched by the first request's tokens
    assert second.accept_tokens("r2", tokens) and _mask(second) == _mask(first)
    assert second.accept_tokens("r2", backend._guidance.ll_tokenizer.tokenize_str("}"))
    assert not first.is_terminated() and _mask(first) != _mask(second)


def test_a_schema_that_fails_to_build_is_not_kept(backend):
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    bad = guidance_grammar_text('{"type": "object", "properties": ')
    for _ in range(2):
        with pytest.raises(ValueError):
            backend.compile_grammar(StructuredOutputOptions.GRAMMAR, bad)
    assert backend._guidance.compiles == 2 and len(backend._templates) == 0
