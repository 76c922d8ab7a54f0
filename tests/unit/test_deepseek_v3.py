"""deepseek_v3 / deepseek_v31 (``tool_parsers/deepseek_v3.py``): vLLM's DeepSeek-V3.1 parser cases
and our own (V3's fenced shape too) under every chunking; the grammar accepts the real call text
and rejects schema-breaking text; end to end through DeepSeek-V3.1's template and the fake engine."""
from __future__ import annotations

from typing import Any

import pytest

from tests.unit import family_cases as fc
from tests.unit._front import CHAT
from tool_parsers import detect_tool_parser, get_family

DATA, CALLS, EXPECT = fc.family_data("deepseek_v3")
TEMPLATE = fc.TEMPLATES / "deepseek_v31.jinja"
# DeepSeek-V3.1's template writes every tool's "parameters" (a tool without them does not render there).
E2E_TOOLS = [t for t in DATA["tools"] if "parameters" in t["function"]]
MARKERS = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")  # never content, even of a broken call


@pytest.mark.parametrize("parser", ["deepseek_v31", "deepseek_v3"])
@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_case(case: dict[str, Any], parser: str) -> None:
    fc.check_case(parser, DATA, case, markers=MARKERS)


def test_detection_and_names() -> None:
    assert detect_tool_parser(TEMPLATE.read_text()) == "deepseek_v31"
    assert detect_tool_parser("<｜tool▁calls▁begin｜>{{ t }}\n```json\n{{ a }}\n```") == "deepseek_v3"
    assert get_family("deepseek_v3").format.name_end == "\n```json\n"


@pytest.mark.parametrize("parser,case", [("deepseek_v31", "with_tool"), ("deepseek_v31", "weather_only"),
                                         ("deepseek_v31", "parameterless"), ("deepseek_v31", "non_ascii_and_quotes"),
                                         ("deepseek_v31", "with_multiple_tools_no_suffix"), ("deepseek_v3", "v3_fenced"),
                                         ("deepseek_v3", "v3_fenced_two_no_newline")])
def test_grammar_accepts_the_real_call_text(parser: str, case: str) -> None:
    text = {"with_multiple_tools_no_suffix": CALLS["with_multiple_tools"].removesuffix(" some suffix text"),
            "v3_fenced_two_no_newline": CALLS["v3_fenced_two"].replace("```<｜tool▁call▁end｜>\n", "```<｜tool▁call▁end｜>")
            }.get(case) or CALLS[case]
    assert fc.grammar_accepts(parser, DATA["tools"], text)


@pytest.mark.parametrize("text", [
    CALLS["weather_only"].replace('"c"', '"kelvin"'),  # not in the enum
    CALLS["with_tool"].replace('{"x":1}', '{"x":"one"}'),  # not an integer
    CALLS["with_tool"].replace('{"x":1}', '{}'),  # required x missing
    CALLS["with_tool"].replace(">foo<", ">fooo<"),  # unknown function
    CALLS["with_tool"] + " Done.",  # text after the calls
    CALLS["v3_fenced"],  # V3's shape where V3.1's is expected
])
def test_grammar_rejects_schema_breaking_text(text: str) -> None:
    assert not fc.grammar_accepts("deepseek_v31", DATA["tools"], text)


def test_grammar_modes() -> None:
    one, two = CALLS["weather_only"], CALLS["with_multiple_tools"].removeprefix("some prefix text").removesuffix(
        " some suffix text")
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert fc.grammar_accepts("deepseek_v31", DATA["tools"], two, tool_choice="required")
    assert not fc.grammar_accepts("deepseek_v31", DATA["tools"], "No call.", tool_choice="required")
    assert not fc.grammar_accepts("deepseek_v31", DATA["tools"], two, tool_choice="required", parallel=False)
    assert fc.grammar_accepts("deepseek_v31", DATA["tools"], one, tool_choice=named)
    assert not fc.grammar_accepts("deepseek_v31", DATA["tools"], two, tool_choice=named)


# --- end to end: DeepSeek-V3.1's template, the scripted engine, the server's grammar and parser -------

@pytest.fixture
def app(make_app: Any, hf_model_dir: Any) -> Any:
    """No DeepSeek tokenizer ships in a PyPI package: SmolLM2's stands in (the markers are text)."""
    return fc.family_app(make_app, hf_model_dir, template=str(TEMPLATE), parser="deepseek_v31")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_end_to_end_through_the_template_and_fake_engine(app: Any, grammar_cache: Any, stream: bool,
                                                         choice: str) -> None:
    case = {"auto": "with_tool", "required": "with_multiple_tools", "named": "weather_only"}[choice]
    text = CALLS[case].removeprefix("some prefix text").removesuffix(" some suffix text")
    tool_choice = {"type": "function", "function": {"name": "get_weather"}} if choice == "named" else choice
    built = app(fc.pieces(text))
    body = {"messages": [{"role": "user", "content": "Call foo."}], "tools": E2E_TOOLS, "tool_choice": tool_choice,
            "max_tokens": 400}
    content, calls = fc.reply_calls(built.client(), body, stream=stream)
    assert calls == [(c["name"], c["arguments"]) for c in EXPECT[case]["tool_calls"]]
    assert content == ("normal text" if choice == "auto" else "")
    request = built.engine.requests[-1]
    assert request.constraint.kind == "structural_tag" and grammar_cache.compile(request.constraint).ok
    prompt = built.engine.tokenizer.decode(request.prompt_token_ids)
    # (vLLM's template indents its output tags: spaces sit between them, as under HF's renderer)
    assert "### get_weather" in prompt and prompt.endswith("</think>") and "<｜User｜>Call foo." in prompt


def test_multi_turn_history_renders_calls_and_results(app: Any) -> None:
    built = app(["It is sunny in Paris."])
    messages = fc.weather_history()
    r = built.client().post(CHAT, json={"messages": messages, "tools": E2E_TOOLS})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "It is sunny in Paris."
    prompt = built.engine.tokenizer.decode(built.engine.requests[-1].prompt_token_ids)
    call = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>'
    assert call in prompt and "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>" in prompt
    assert prompt.endswith("<｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜>")
    assert r.json()["choices"][0]["message"]["tool_calls"] is None
