"""server/engine/budget_plan.py: the shortest valid ending of what a grammar has open."""
from __future__ import annotations

import json

import pytest
import xgrammar as xgr
from jsonschema import Draft202012Validator

from server.engine.budget_plan import (
    BudgetHeader,
    GuidanceBytes,
    Vocab,
    XGrammarBytes,
    closers_of,
    shortest_completion,
    split_budget_spec,
)
from tests.unit.budget_cases import SCHEMAS, bench_schemas

ALL = {**SCHEMAS, **bench_schemas()}


@pytest.fixture(scope="module")
def info(hf_model_dir):
    from transformers import AutoTokenizer

    return xgr.TokenizerInfo.from_huggingface(AutoTokenizer.from_pretrained(str(hf_model_dir)))


@pytest.fixture(scope="module")
def compiler(info):
    return xgr.GrammarCompiler(info)


def _valid(schema, text):
    value = json.loads(text)
    return [e.message for e in Draft202012Validator(schema).iter_errors(value)]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("look_ahead", [False, True])
def test_every_prefix_of_a_valid_answer_ends_valid(compiler, name, look_ahead):
    """From each prefix of an answer the grammar takes, the ending makes a document that parses
    and fits the schema (the grammar took every byte of it)."""
    schema = SCHEMAS[name]
    start = shortest_completion(XGrammarBytes(xgr.GrammarMatcher(compiler.compile_json_schema(json.dumps(schema)))))
    assert start is not None
    answer = start.decode()
    assert not _valid(schema, answer)
    ctx = compiler.compile_json_schema(json.dumps(schema))
    for cut in range(len(answer) + 1):
        m = xgr.GrammarMatcher(ctx)
        assert m.accept_string(answer[:cut])
        ending = shortest_completion(XGrammarBytes(m), look_ahead=look_ahead)
        assert ending is not None, (name, answer[:cut])
        assert not _valid(schema, answer[:cut] + ending.decode()), (answer[:cut], ending)
        if cut == len(answer):
            assert ending == b""


def test_look_ahead_skips_optional_properties(compiler):
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
              "required": ["b"], "additionalProperties": False}
    m = XGrammarBytes(xgr.GrammarMatcher(compiler.compile_json_schema(json.dumps(schema))))
    assert shortest_completion(m, look_ahead=True) == b'{"b":0}'


def test_the_walk_reaches_a_pattern_and_a_format(compiler):
    for schema in ({"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"}, {"type": "string", "format": "email"},
                   {"type": "string", "format": "date"}, {"type": "string", "pattern": "^a*b$"}):
        m = XGrammarBytes(xgr.GrammarMatcher(compiler.compile_json_schema(json.dumps(schema))))
        ending = shortest_completion(m)
        assert ending is not None and not _valid(schema, ending.decode()), (schema, ending)


def test_a_think_block_is_left_by_its_end_marker(compiler):
    tag = {"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"},
        {"type": "json_schema", "json_schema": {"type": "object", "required": ["x"], "additionalProperties": False,
                                                "properties": {"x": {"type": "integer"}}}}]}}
    closers = closers_of(tag)
    assert "</think>" in closers
    m = xgr.GrammarMatcher(compiler.compile_structural_tag(json.dumps(tag)))
    assert m.accept_string("<think>I wonder \"what")
    assert shortest_completion(XGrammarBytes(m), closers) == b'</think>{"x":0}'


def test_llguidance_matchers_walk_the_same_way(info):
    import llguidance as llg

    from server.structured.grammar_cache import GrammarCache

    cache = GrammarCache(info)
    vocab = Vocab([bytes(t) for t in info.decoded_vocab], special=info.special_token_ids)
    schema = {"type": "object", "properties": {"a": {"type": "string", "minLength": 3},
                                               "b": {"oneOf": [{"type": "integer"}, {"type": "string"}]}},
              "required": ["a", "b"]}
    grammar = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults={"whitespace_flexible": True})
    m = GuidanceBytes(llg.LLMatcher(cache._ll_tokenizer(info), grammar), vocab)
    assert m.accept(b'{"a": "x')
    ending = shortest_completion(m, look_ahead=True)
    assert ending is not None and not _valid(schema, '{"a": "x' + ending.decode())


@pytest.mark.parametrize("name", ["required nested", "anyOf", "pattern and format", "top-level array"])
def test_a_walk_leaves_its_matcher_as_it_found_it(compiler, info, name):
    """The walk takes its steps on the matcher itself and undoes them all: the mask, the forced
    text and what the matcher takes next are the same after it, at every prefix."""
    schema = SCHEMAS[name]
    ctx = compiler.compile_json_schema(json.dumps(schema))
    answer = shortest_completion(XGrammarBytes(xgr.GrammarMatcher(ctx)), look_ahead=True)
    assert answer is not None
    bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
    for cut in range(len(answer)):
        live = xgr.GrammarMatcher(ctx)
        assert live.accept_string(answer[:cut])
        m = XGrammarBytes(live)
        live.fill_next_token_bitmask(bitmask)
        before = (bitmask.clone(), live.find_jump_forward_string(), live.is_completed())
        assert shortest_completion(m, look_ahead=True) is not None
        live.fill_next_token_bitmask(bitmask)
        assert bool((bitmask == before[0]).all()), answer[:cut]
        assert (live.find_jump_forward_string(), live.is_completed()) == before[1:]
        assert m.steps == 0 and live.accept_string(answer[cut:]) and live.is_completed()


def test_takes_and_back_to_in_both_adapters(info):
    import llguidance as llg

    from server.structured.grammar_cache import GrammarCache

    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
              "additionalProperties": False}
    vocab = Vocab([bytes(t) for t in info.decoded_vocab], special=info.special_token_ids)
    grammar = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults={"whitespace_flexible": False})
    ctx = xgr.GrammarCompiler(info).compile_json_schema(json.dumps(schema), any_whitespace=False,
                                                        separators=(",", ":"))
    ll_tokenizer = GrammarCache(info)._ll_tokenizer(info)
    for m in (XGrammarBytes(xgr.GrammarMatcher(ctx)),
              GuidanceBytes(llg.LLMatcher(ll_tokenizer, grammar), vocab),
              GuidanceBytes(llg.LLMatcher(ll_tokenizer, grammar), vocab, eos=ll_tokenizer.eos_token)):
        assert m.accept(b'{"a":"')
        start = m.mark()
        assert m.takes(b"xy") and not m.takes(b"\"}}")
        assert m.mark() == start  # a trial took nothing
        assert m.accept(b"xy") and m.accept(b'"') and m.accept(b"}") and m.can_stop()
        m.back_to(start)
        assert not m.can_stop() and m.forced() == b"" and m.accept(b'z"}') and m.can_stop(), type(m)
        assert not m.accept(b"}") and m.can_stop()  # refused: nothing changed


def test_llguidance_holds_the_tokens_that_complete_the_answer(info):
    """With EOS known, the tokens that end the answer are validated, not consumed (consuming them
    costs llguidance tens of microseconds); undone, they were never there; anything that reads the
    state after them consumes them first."""
    import llguidance as llg

    from server.structured.grammar_cache import GrammarCache

    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
              "required": ["a"], "additionalProperties": False}
    ll_tokenizer = GrammarCache(info)._ll_tokenizer(info)
    grammar = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults={"whitespace_flexible": False})
    live = llg.LLMatcher(ll_tokenizer, grammar)
    m = GuidanceBytes(live, Vocab([bytes(t) for t in info.decoded_vocab], special=info.special_token_ids),
                      eos=ll_tokenizer.eos_token)
    assert m.accept(b'{"a":[1')
    start = m.mark()
    assert m.accept(b"]}") and m.can_stop() and not live.is_accepting()  # held, not consumed
    m.back_to(start)
    assert not m.can_stop() and m.mark() == start and m.accept(b",2]}") and m.can_stop()
    assert m.forced() == b"" and live.is_accepting()  # read after them: consumed first
    m.back_to(start)
    assert not live.is_accepting() and m.accept(b"]}")
    copy = m.fork()  # a copy carries them too
    assert copy.can_stop() and copy.m.is_accepting() and live.is_accepting()


@pytest.mark.parametrize("name", ["required nested", "arrays", "enums and bounds", "top-level array"])
def test_llguidance_walks_the_same_with_and_without_eos(info, name):
    """The held tokens change the cost of a walk, never its ending: the same bytes at every prefix
    of the shortest answer, plain and looking ahead."""
    import llguidance as llg

    from server.structured.grammar_cache import GrammarCache

    ll_tokenizer = GrammarCache(info)._ll_tokenizer(info)
    vocab = Vocab([bytes(t) for t in info.decoded_vocab], special=info.special_token_ids)
    grammar = llg.LLMatcher.grammar_from_json_schema(json.dumps(SCHEMAS[name]), defaults={"whitespace_flexible": False})
    answer = shortest_completion(GuidanceBytes(llg.LLMatcher(ll_tokenizer, grammar), vocab), look_ahead=True)
    assert answer
    for cut in range(len(answer)):
        walks = []
        for eos in (None, ll_tokenizer.eos_token):
            m = GuidanceBytes(llg.LLMatcher(ll_tokenizer, grammar), vocab, eos=eos)
            assert m.accept(answer[:cut])
            walks.append((shortest_completion(m), shortest_completion(m, look_ahead=True), m.can_stop(), m.forced()))
        assert walks[0] == walks[1], answer[:cut]


def test_vocab_writes_bytes_as_few_tokens(info):
    vocab = Vocab([bytes(t) for t in info.decoded_vocab], special=info.special_token_ids)
    tokens = vocab.tokens(b'{"name": "x"}')
    assert tokens is not None and b"".join(bytes(info.decoded_vocab[t]) for t in tokens) == b'{"name": "x"}'
    assert len(tokens) < len(b'{"name": "x"}')
    assert not set(tokens) & set(info.special_token_ids)


def test_the_header_travels_with_the_spec():
    header = BudgetHeader(max_tokens=17, kind="structural_tag", closers=("</think>", '"'))
    wrapped = header.wrap('{"type": "structural_tag"}\nsecond line')
    assert split_budget_spec(wrapped) == (header, '{"type": "structural_tag"}\nsecond line')
    assert split_budget_spec('root ::= "a"') is None


def test_closers_come_from_tag_ends_and_argument_styles():
    tag = {"type": "structural_tag", "format": {"type": "tag", "begin": "<tool_call>", "end": "</tool_call>",
                                                "content": {"type": "json_schema", "json_schema": {},
                                                            "style": "qwen_xml"}}}
    assert closers_of(tag) == ("</parameter>", "</tool_call>", "\n</parameter>")


def test_a_user_grammar_cannot_pose_as_a_budget_header():
    """Client text never becomes the engine's budget header (a 400, as for the llguidance marker)."""
    from server.structured.constraints import constraint_from_request
    from server.structured.errors import ConstraintError

    spec = BudgetHeader(max_tokens=5, kind="grammar").wrap('root ::= "a"')
    with pytest.raises(ConstraintError, match="may not start with"):
        constraint_from_request(response_format=None, structured_outputs={"grammar": spec}, tools=None, tool_format=None)


def test_vocab_counts_are_remembered_and_the_same_as_counted() -> None:
    """``count`` remembers endings (they repeat step after step) and answers as ``tokens`` does,
    None included; the memory is bounded."""
    vocab = Vocab([b"a", b"b", b"ab", b"}", b"\"}", b"abc"], special=[])
    for data in (b"ab}", b"abc\"}", b"x", b"", b"aab"):
        first = vocab.count(data)
        tokens = vocab.tokens(data)
        assert first == (None if tokens is None else len(tokens)) == vocab.count(data)
    assert vocab.count(b"abc\"}") == 2 and vocab.count(b"x") is None
    for i in range(5000):
        vocab.count(b"a" * (i % 50) + bytes([98 + i % 2]) * (i // 50))
    assert len(vocab._counts) <= 4096
