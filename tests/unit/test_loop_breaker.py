"""The loop breaker (server/engine/loop_breaker.py), driven as vLLM drives it.

A scripted "model" prefers the next token of a text that repeats one value forever; a real
XGrammar matcher on the embedded model's tokenizer masks each step as vLLM's grammar does;
the breaker then edits the row and the step takes the argmax. What comes out must be valid
JSON with the loop shortened (never a value of the breaker's own), and outputs that are not
loops must come out exactly as the script wrote them.
"""
from __future__ import annotations

import json
from typing import Any

import pytest
import torch
import xgrammar as xgr

from server.engine.loop_breaker import (
    MIN_REPEATS,
    ClosingTokens,
    JsonDepth,
    LoopBreaker,
    closes,
    find_loop,
    vocab_bytes,
    wants_another_element,
)
from tests.unit.test_constraints import _load_tokenizer


@pytest.fixture(scope="module")
def world() -> dict[str, Any]:
    tok = _load_tokenizer()
    info = xgr.TokenizerInfo.from_huggingface(tok)
    vocab = vocab_bytes(info, info.vocab_size)
    return {"tok": tok, "info": info, "vocab": vocab, "compiler": xgr.GrammarCompiler(info),
            "closing": ClosingTokens(vocab, to_ids=lambda ids: torch.tensor(ids, dtype=torch.long))}


def _decode(world: dict[str, Any], schema: dict[str, Any] | None, script: str, *, steps: int = 400,
            breaker: bool = True) -> tuple[str, LoopBreaker]:
    """Greedy decoding of ``script`` (the model's wish) under ``schema`` (None: no grammar).

    While the text so far is a prefix of the script, the model wants the script's next token
    (so a token the breaker chose that the script also has keeps the model on it); off the
    script, it wants to finish.
    """
    tok, info, vocab = world["tok"], world["info"], world["vocab"]
    eos = tok.eos_token_id
    closers = {i for i, t in enumerate(vocab) if t.strip() in (b"}", b"]")}
    matcher = None
    if schema is not None:
        matcher = xgr.GrammarMatcher(world["compiler"].compile_json_schema(json.dumps(schema)))
    lb = LoopBreaker(vocab, world["closing"])
    out: list[int] = []
    bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
    for _ in range(steps):
        logits = torch.zeros(info.vocab_size)
        logits[list(closers)] = 2.0  # off script, the model wants to finish
        logits[eos] = 1.0
        text = tok.decode(out)
        if script.startswith(text) and len(text) < len(script):  # on script: its next token
            logits[tok.encode(script[len(text):], add_special_tokens=False)[0]] = 10.0
        if matcher is not None:
            matcher.fill_next_token_bitmask(bitmask)
            xgr.apply_token_bitmask_inplace(logits.unsqueeze(0), bitmask)
        if breaker:
            logits = lb(out, logits)
        nxt = int(logits.argmax())
        if nxt == eos or (matcher is not None and matcher.is_terminated()):
            break
        if matcher is not None:
            assert matcher.accept_token(nxt)
        out.append(nxt)
    return tok.decode(out), lb


SERVICES = {"type": "object", "properties": {"services": {"type": "array", "items": {"type": "string"}}},
            "required": ["services"]}


def test_a_looping_array_of_strings_is_closed_after_a_whole_element(world) -> None:
    text, lb = _decode(world, SERVICES, '{"services": [' + '"booking", ' * 100)
    services = json.loads(text)["services"]
    assert set(services) == {"booking"} and MIN_REPEATS <= len(services) < MIN_REPEATS + 8
    assert lb.broken == 1


def test_a_looping_array_of_numbers_keeps_whole_numbers(world) -> None:
    schema = {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "number"}}}}
    text, lb = _decode(world, schema, '{"xs": [' + "12.5, " * 100)
    xs = json.loads(text)["xs"]
    assert set(xs) == {12.5} and MIN_REPEATS <= len(xs) < MIN_REPEATS + 8 and lb.broken == 1


def test_a_looping_string_ends_after_whole_cycles(world) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    text, lb = _decode(world, schema, '{"name": "' + "pineapple_" * 100)
    name = json.loads(text)["name"]
    assert len(name) >= MIN_REPEATS * len("pineapple_") and name == ("pineapple_" * 100)[:len(name)]
    assert lb.broken == 1


def test_a_loop_of_objects_closes_the_array_that_holds_them(world) -> None:
    schema = {"type": "object", "properties": {"rows": {"type": "array", "items": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}, "required": ["rows"]}
    text, lb = _decode(world, schema, '{"rows": [' + '{"a": 0}, ' * 100)
    rows = json.loads(text)["rows"]
    assert rows == [{"a": 0}] * len(rows) and MIN_REPEATS <= len(rows) < MIN_REPEATS + 8 and lb.broken == 1


def test_where_the_grammar_allows_no_close_the_breaker_waits(world) -> None:
    schema = {"type": "object", "properties": {"services": {"type": "array", "items": {"type": "string"},
                                                           "minItems": 30}}, "required": ["services"]}
    text, lb = _decode(world, schema, '{"services": [' + '"x", ' * 100)
    assert json.loads(text)["services"] == ["x"] * 30 and lb.broken == 1


@pytest.mark.parametrize("script", [
    '{"services": [' + '"a", ' * 10 + '"b"]}',  # ten equal elements, then the end: not a loop
    '{"services": [' + ", ".join(f'"item {i}"' for i in range(40)) + "]}",  # long, but no cycle
    '{"services": ["' + "ab" * 10 + '"]}',
])
def test_what_is_not_a_loop_comes_out_as_written(world, script: str) -> None:
    text, lb = _decode(world, SERVICES, script)
    assert text == script and lb.broken == 0


def test_a_loop_in_prose_outside_json_is_left_alone(world) -> None:
    text, lb = _decode(world, None, "ha " * 200, steps=120)
    assert text == ("ha " * 200)[:len(text)] and len(text) > 200 and lb.broken == 0


def test_the_breaker_off_lets_the_loop_run(world) -> None:
    text, _ = _decode(world, SERVICES, '{"services": [' + '"booking", ' * 100, steps=200, breaker=False)
    assert text.count("booking") > 2 * MIN_REPEATS and not text.rstrip().endswith("}")


# ---------------------------------------------------------------- the pieces

def test_find_loop_thresholds_and_span() -> None:
    assert find_loop([5, 6] + [1, 2, 3] * MIN_REPEATS) == (3, 3 * MIN_REPEATS)
    assert find_loop([5, 6] + [1, 2, 3] * (MIN_REPEATS - 1)) is None
    assert find_loop([9] * 47) is None and find_loop([9] * 48) == (1, 48)
    assert find_loop([9] * 60 + [1]) is None  # the latest token breaks the cycle
    assert find_loop([1, 2, 1, 2, 3] * 20) == (5, 100)


def test_json_depth_reads_strings_escapes_and_prose() -> None:
    d = JsonDepth()
    d.feed(b'He said "hi" and then <tool_call>{"a": ["x\\"]", {')
    assert bytes(d.stack) == b"{[{"
    d.feed(b'}]}')
    assert d.stack == []
    d.feed(b'"not a string')
    assert d.stack == []


def test_closing_tokens_and_the_next_element_probe() -> None:
    assert closes(b'"]', b'"]', in_string=True) and closes(b'"', b'"]', in_string=True)
    assert not closes(b' "', b'"', in_string=True)  # a blank inside a string is text
    assert closes(b" ]}", b"]", in_string=False) and not closes(b",", b"]", in_string=False)
    q, arr = ord('"'), ord("[")
    assert wants_another_element([arr, q], False, b'",', 1)  # closes the string, then a comma
    assert wants_another_element([arr], False, b" ,", 1)
    assert not wants_another_element([arr], False, b' "', 1)
    assert not wants_another_element([arr, q], True, b'",', 1)  # escaped quote: still in the string


# ---------------------------------------------------------------- how the adapter turns it on

@pytest.mark.parametrize("on", [True, False])
def test_the_adapter_asks_for_it_on_json_constraints_only(on: bool) -> None:
    pytest.importorskip("vllm")
    from server.engine.base import GenerateRequest, Sampling
    from server.engine.loop_breaker import EXTRA_ARG
    from server.engine.vllm_engine import VllmEngine
    from server.structured.constraints import Constraint

    engine = object.__new__(VllmEngine)  # no AsyncLLM: only the request mapping is exercised
    engine._break_loops = on

    def extra(constraint: Constraint | None) -> Any:
        req = GenerateRequest("r", [1], Sampling(max_tokens=4), constraint=constraint)
        return (engine._sampling_params(req).extra_args or {}).get(EXTRA_ARG, False)

    for kind, value in (("json", {"type": "object"}), ("json_object", True),
                        ("structural_tag", {"type": "structural_tag", "format": {"type": "const_string", "value": "x"}})):
        assert extra(Constraint(kind=kind, value=value)) is on
    assert extra(Constraint(kind="regex", value=r"\d+")) is False and extra(None) is False


def test_vllm_loads_the_processor_by_its_name() -> None:
    pytest.importorskip("vllm")
    from vllm.v1.sample.logits_processor import LogitsProcessor, _load_logitsprocs_by_fqcns

    from server.engine.loop_breaker import FQCN

    (cls,) = _load_logitsprocs_by_fqcns([FQCN])
    assert issubclass(cls, LogitsProcessor) and cls.__name__ == "LoopBreakerProcessor"


def test_json_depth_remembers_a_close_even_when_reopened() -> None:
    d = JsonDepth()
    d.feed(b'{"rows": [[0, 0], [0')
    d.low = len(d.stack)
    d.feed(b"], [")  # one token that closes the inner array and opens the next
    assert len(d.stack) == 3 and d.low == 2
