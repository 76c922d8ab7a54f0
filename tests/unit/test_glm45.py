"""glm45 / glm47 (``tool_parsers/glm45.py``): vLLM's GLM-4.5 parser cases and our own (GLM-4.7's
layout too) under every chunking, with arguments typed by the tools' schemas; the grammar
(XGrammar's ``glm_xml`` style) accepts the real call text and rejects schema-breaking text; end to
end through GLM-4.5's template and the fake engine."""
from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit import family_cases as fc
from tests.unit._front import CHAT
from tool_parsers import detect_tool_parser, get_family

DATA, CALLS, EXPECT = fc.family_data("glm45")
TEMPLATE = fc.TEMPLATES / "glm45.jinja"


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_case(case: dict[str, Any]) -> None:
    fc.check_case("glm45", DATA, case, markers=("</arg_value>", "</tool_call>"))


def test_detection_and_names() -> None:
    assert detect_tool_parser(TEMPLATE.read_text()) == "glm45"
    assert get_family("glm47").format == get_family("glm45").format


@pytest.mark.parametrize("case", ["single_tool_call", "multiple_tool_calls_one_newline", "tool_call_with_content_before",
                                  "tool_call_with_chinese_content", "empty_arguments", "special_characters",
                                  "glm47_tight", "string_looks_like_number"])
def test_grammar_accepts_the_real_call_text(case: str) -> None:
    assert fc.grammar_accepts("glm45", DATA["tools"], TWO if case == "multiple_tool_calls_one_newline" else CALLS[case])


TIGHT = CALLS["glm47_tight"]
TWO = CALLS["multiple_tool_calls"].replace("\n    <tool_call>", "\n<tool_call>")  # the template's one newline between


@pytest.mark.parametrize("text", [
    CALLS["single_tool_call"].replace("fahrenheit", "kelvin"),  # not in the enum
    TIGHT.replace("<arg_value>3<", "<arg_value>three<"),  # not an integer
    CALLS["single_tool_call"].replace("<arg_key>state</arg_key>\n    <arg_value>TX</arg_value>\n    ", ""),  # required
    TIGHT.replace("get_weather", "get_wether"),  # unknown function
    TIGHT + "\nDone.",  # text after the last call
])
def test_grammar_rejects_schema_breaking_text(text: str) -> None:
    assert not fc.grammar_accepts("glm45", DATA["tools"], text)


def test_grammar_modes() -> None:
    one, two = CALLS["single_tool_call"], TWO
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert fc.grammar_accepts("glm47", DATA["tools"], two, tool_choice="required")
    assert not fc.grammar_accepts("glm45", DATA["tools"], "No call.", tool_choice="required")
    assert not fc.grammar_accepts("glm45", DATA["tools"], two, tool_choice="required", parallel=False)
    assert fc.grammar_accepts("glm45", DATA["tools"], one, tool_choice="required", parallel=False)
    assert not fc.grammar_accepts("glm45", DATA["tools"], one, tool_choice=named)
    assert fc.grammar_accepts("glm45", DATA["tools"], TIGHT, tool_choice=named)


# --- end to end: GLM-4.5's template, the scripted engine, the server's grammar and parser ----------

@pytest.fixture
def app(make_app: Any, hf_model_dir: Any) -> Any:
    """No GLM tokenizer ships in a PyPI package: SmolLM2's stands in (the tags are text)."""
    return fc.family_app(make_app, hf_model_dir, template=str(TEMPLATE), parser="glm45")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_end_to_end_through_the_template_and_fake_engine(app: Any, grammar_cache: Any, stream: bool,
                                                         choice: str) -> None:
    case = {"auto": "tool_call_with_chinese_content", "required": "multiple_tool_calls",
            "named": "string_looks_like_number"}[choice]
    tool_choice = {"type": "function", "function": {"name": "get_weather"}} if choice == "named" else choice
    built = app(fc.pieces(TWO if case == "multiple_tool_calls" else CALLS[case]))
    body = {"messages": [{"role": "user", "content": "Weather?"}], "tools": DATA["tools"], "tool_choice": tool_choice,
            "max_tokens": 1000}
    content, calls = fc.reply_calls(built.client(), body, stream=stream)
    # (these cases hold string values only: the server does not bind its parser to the schemas yet, see
    # test_qwen3_coder.py::test_end_to_end_types_arguments_by_schema)
    assert calls == [(c["name"], c["arguments"]) for c in EXPECT[case]["tool_calls"]]
    assert content == (EXPECT[case]["content"] or "")
    request = built.engine.requests[-1]
    assert request.constraint.kind == "structural_tag" and grammar_cache.compile(request.constraint).ok
    prompt = built.engine.tokenizer.decode(request.prompt_token_ids)
    assert '"name": "get_weather"' in prompt and prompt.endswith("<|assistant|>")


def test_multi_turn_history_renders_calls_and_results(app: Any) -> None:
    built = app(["It is sunny in Paris."])
    messages = fc.weather_history('{"city": "Paris", "days": 3}')
    r = built.client().post(CHAT, json={"messages": messages, "tools": DATA["tools"]})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "It is sunny in Paris."
    prompt = built.engine.tokenizer.decode(built.engine.requests[-1].prompt_token_ids)
    start = prompt.index("<tool_call>get_weather")  # (the system prompt shows the format first)
    history = prompt[start : prompt.index("</tool_call>", start) + len("</tool_call>")]
    assert history == ("<tool_call>get_weather<arg_key>city</arg_key>\n<arg_value>Paris</arg_value><arg_key>days</arg_key>\n"
                       "<arg_value>3</arg_value></tool_call>")  # the template's own layout, which the parser reads back:
    parser = get_family("glm45").parser.with_tools({"get_weather": DATA["tools"][1]["function"]["parameters"]})
    (call,) = parser.parse(history, final=True).tool_calls
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris", "days": 3})
    assert "<|observation|>\n<tool_response>\nsunny\n</tool_response>" in prompt
