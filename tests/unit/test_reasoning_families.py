"""Reasoning with tools in every thinking family, end to end through its published template and the fake
engine (SmolLM2's tokenizer standing in): the family's reasoning parser is the one ``--reasoning-parser auto``
picks from that template; the model thinks, then calls; ``reasoning_content`` comes back beside the call,
streamed and not; under ``required`` the request's grammar lets it think first and still refuses a call
with schema-breaking arguments; where the template's switch turns thinking off, no reasoning is read
and the grammar has no think block. (Qwen3: ``test_qwen3.py``; gpt-oss: ``test_gpt_oss.py``.)"""
from __future__ import annotations

from typing import Any

import pytest

from tests.unit.family_cases import (
    TEMPLATES,
    family_app,
    family_data,
    pieces,
    reply_message,
    structural_tag_accepts,
)
from tool_parsers import resolve_parsers

THOUGHT = "The user wants the weather; I should call the tool."

# family, template, a case with one call, the switch that turns thinking on or off, where the prompt ends
FAMILIES: dict[str, dict[str, Any]] = {
    "deepseek_v31": {"template": "deepseek_v31.jinja", "data": "deepseek_v3", "case": "weather_only",
                     "on": {"thinking": True}, "off": {}, "opened": "<｜Assistant｜><think>"},
    "kimi_k2": {"template": "kimi_k2.jinja", "data": "kimi_k2", "case": "parameterless",
                "on": {}, "off": {"thinking": False}, "opened": "<|im_assistant|>assistant<|im_middle|>"},
    "glm45": {"template": "glm45.jinja", "data": "glm45", "case": "single_tool_call",
              "on": {}, "off": {"enable_thinking": False}, "opened": "<|assistant|>"},
}


def _tools(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The case file's tools, a parameterless one given its empty schema (DeepSeek's template prints
    every tool's schema)."""
    empty = {"type": "object", "properties": {}}
    return [{**t, "function": {"parameters": empty, **t["function"]}} for t in data["tools"]]


def _setup(name: str) -> tuple[dict[str, Any], str, str, Any]:
    spec = FAMILIES[name]
    data, calls, expect = family_data(spec["data"])
    call = calls[spec["case"]]
    want = [(c["name"], c["arguments"]) for c in expect[spec["case"]]["tool_calls"]]
    source = (TEMPLATES / spec["template"]).read_text(encoding="utf-8")
    parsers = resolve_parsers(name, "auto", template_name="file", template_source=source)
    return data, call, source, (parsers, want)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_auto_picks_the_familys_reasoning_parser_from_its_template(name: str) -> None:
    _, _, source, (parsers, _) = _setup(name)
    assert parsers.reasoning is not None and parsers.reasoning.name == parsers.family.reasoning  # type: ignore[union-attr]
    assert parsers.reasoning.tool_start == (parsers.family.format.trigger,)  # type: ignore[union-attr]
    assert resolve_parsers("auto", "auto", template_name="file", template_source=source).family.name in (  # type: ignore[union-attr]
        name, FAMILIES[name]["data"])


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required"])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_thinking_then_a_call(make_app: Any, hf_model_dir: Any, grammar_cache: Any, name: str, choice: str,
                              stream: bool) -> None:
    spec = FAMILIES[name]
    data, call, _, (parsers, want) = _setup(name)
    text = "<think>" + THOUGHT + "</think>" + call
    built = family_app(make_app, hf_model_dir, template=str(TEMPLATES / spec["template"]), parser=name,
                       reasoning=parsers.reasoning.name)(pieces(text))
    body = {"messages": [{"role": "user", "content": "Go."}], "tools": _tools(data), "tool_choice": choice,
            "chat_template_kwargs": spec["on"], "max_tokens": 600}
    assert reply_message(built.client(), body, stream=stream) == (THOUGHT, "", want)
    request = built.engine.requests[-1]
    prompt = "".join(built.engine.tokenizer.decode(request.prompt_token_ids).split())  # (its Jinja leaves blanks)
    assert prompt.endswith(spec["opened"])
    assert grammar_cache.compile(request.constraint).ok and structural_tag_accepts(request.constraint, text)
    if choice == "required":  # it may think first, but then it must call a tool it was given
        assert not structural_tag_accepts(request.constraint, "<think>" + THOUGHT + "</think>Done.")
        assert not structural_tag_accepts(request.constraint, text.replace(want[0][0], want[0][0] + "zz", 1))


@pytest.mark.parametrize("name", list(FAMILIES))
def test_thinking_switched_off(make_app: Any, hf_model_dir: Any, name: str) -> None:
    """The template's own switch: no reasoning is read, and the grammar has no think block."""
    spec = FAMILIES[name]
    data, call, _, (parsers, want) = _setup(name)
    built = family_app(make_app, hf_model_dir, template=str(TEMPLATES / spec["template"]), parser=name,
                       reasoning=parsers.reasoning.name)(pieces(call))
    body = {"messages": [{"role": "user", "content": "Go."}], "tools": _tools(data), "tool_choice": "required",
            "chat_template_kwargs": spec["off"], "max_tokens": 600}
    assert reply_message(built.client(), body, stream=False) == ("", "", want)
    request = built.engine.requests[-1]
    assert structural_tag_accepts(request.constraint, call)
    assert not structural_tag_accepts(request.constraint, "<think>" + THOUGHT + "</think>" + call)
