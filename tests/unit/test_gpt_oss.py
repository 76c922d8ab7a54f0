"""gpt_oss (``tool_parsers/gpt_oss.py``, Harmony): vLLM's gpt-oss parser cases (rendered with
openai_harmony as vLLM's test renders them) and our own under every chunking, with and without the
``openai_gptoss`` reasoning parser in front; checkpoints with reasoning; Harmony's markers are single
special tokens of the real encoding; the family's grammar accepts the real call text and rejects
schema-breaking text in every mode; gpt-oss's own chat template renders a multi-turn conversation as
openai_harmony does; end to end through that template and the fake engine."""
from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tests.unit import family_cases as fc
from tests.unit._front import CHAT
from tests.unit.parser_contract import checkpoint_checks
from tool_parsers import detect_tool_parser, get_family, get_tool_parser
from tool_parsers.gpt_oss import MARKERS
from server.structured.tools import tool_spec_of

DATA, CALLS, EXPECT = fc.family_data("gpt_oss")
TOOLS = DATA["tools"]
NEVER_SHOWN = ("<|channel|>", "<|message|>", "<|start|>", "<|call|>", "<|constrain|>")  # never content nor reasoning


@pytest.mark.parametrize("reasoning", [None, "openai_gptoss"])
@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_case(case: dict[str, Any], reasoning: str | None) -> None:
    """The tool parser alone returns analysis as reasoning; with the reasoning parser in front (vLLM's
    flags), the first analysis message is the reasoning parser's and the rest the tool parser's: the
    same message either way, under every chunking."""
    markers = () if case["id"] in ("malformed_arguments_are_content", "not_harmony_text") else NEVER_SHOWN
    fc.check_case("gpt_oss", DATA, case, reasoning=reasoning, markers=markers)


def test_detection_and_names() -> None:
    template = (fc.TEMPLATES / "gpt_oss.jinja").read_text(encoding="utf-8")
    assert detect_tool_parser(template) == "gpt_oss"
    assert get_family("gpt_oss").reasoning == get_family("openai").reasoning == "openai_gptoss"
    assert get_tool_parser("openai").format == get_tool_parser("gpt_oss").format
    assert get_tool_parser("gpt_oss").channels


def test_markers_are_single_special_tokens_of_the_real_encoding() -> None:
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    for marker in MARKERS:
        ids = enc.encode(marker, allowed_special="all")
        assert len(ids) == 1 and enc.is_special_token(ids[0]), marker
    parser = get_tool_parser("gpt_oss")  # what the server checks to keep special tokens in the output
    assert {parser.start, parser.end} <= set(MARKERS)
    assert set(enc.stop_tokens_for_assistant_actions()) >= {enc.encode(m, allowed_special="all")[0]
                                                      for m in ("<|call|>", "<|return|>")}


_PIECES = ["<|channel|>", "analysis", "final", "commentary", "<|message|>", "<|end|>", "<|start|>assistant",
           " to=functions.get_current_weather", " <|constrain|>json", " json", "<|call|>", "<|return|>",
           '{"city": "Oslo"}', "{", "}", '"', "Hi ", "\n", "é东", "<|", "to=browser.search", "{}"]


def test_checkpoints_hold_for_every_continuation_reasoning_included() -> None:
    """What a parse settles (content, calls, errors and reasoning) is what every longer text's parse
    starts with, and parsing on from the checkpoint gives the rest."""
    rng = random.Random("gpt_oss-checkpoints")
    texts = ["".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 10))) for _ in range(60)]
    checked = checkpoint_checks(get_tool_parser("gpt_oss"), texts)
    assert checked > 1000


def test_a_long_analysis_is_settled_as_it_streams() -> None:
    """Inside a long body the parser checkpoints, so a stream re-reads only new text."""
    parser = get_tool_parser("gpt_oss")
    text = "<|channel|>analysis<|message|>" + "think " * 100 + "<|e"
    got = parser.parse(text, final=False)
    assert got.reasoning == "think " * 100 and got.checkpoint is not None
    assert got.checkpoint.pos == len(text) - 3 and got.checkpoint.reasoning == len(got.reasoning)


# --- the grammar --------------------------------------------------------------------------------------

GRAMMAR_TOOLS = [t for t in TOOLS if t["function"]["name"] in ("get_current_weather", "empty_args")]
CALL = ('<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>'
        '{"city": "Paris", "unit": "celsius"}')
ANALYSIS = "<|channel|>analysis<|message|>The user wants the weather; call get_current_weather.<|end|><|start|>assistant"
FINAL = "<|channel|>final<|message|>It is sunny.<|return|>"


@pytest.mark.parametrize("text", [
    CALL, CALL + "<|call|>", ANALYSIS + CALL, ANALYSIS + CALL + "<|call|>",
    CALLS["recipient_before_channel"].removesuffix("<|call|>").replace("get_current_weather", "empty_args")
    .replace('{"city": "Paris", "unit": "celsius"}', "{}"),
    CALLS["preamble_then_call"].replace('"city": "Paris", ', '"city": "Paris", '),
    ANALYSIS + FINAL, FINAL, ANALYSIS + "<|channel|>final<|message|>Sunny.",
    CALLS["call_on_analysis_channel"],
])
def test_grammar_accepts_the_real_call_text(text: str) -> None:
    tools = TOOLS if "empty_args" not in text else GRAMMAR_TOOLS
    assert fc.grammar_accepts("gpt_oss", tools, text), text


@pytest.mark.parametrize("text", [
    CALL.replace('"celsius"', '"kelvin"'),  # outside the enum
    CALL.replace('"Paris"', "7"),  # not a string
    CALL.replace("get_current_weather", "get_current_weathr"),  # unknown function
    CALL + "<|call|> And more.",  # text after the call
    CALL.replace("{", "[", 1),  # not an object
    "Sunny, no channel.",  # text outside a message
    "<|channel|>commentary to=functions.empty_args <|constrain|>json<|message|>{\"a\": 1}",  # parameterless takes {}
    "<|channel|>analysis to=browser.search code<|message|>{}",  # not a function tool
])
def test_grammar_rejects_schema_breaking_text(text: str) -> None:
    assert not fc.grammar_accepts("gpt_oss", GRAMMAR_TOOLS, text), text


def test_grammar_modes() -> None:
    two = CALL + "<|call|><|start|>assistant" + CALL.replace("Paris", "Oslo")
    named = {"type": "function", "function": {"name": "get_current_weather"}}
    allowed = {"type": "allowed_tools", "mode": "required", "names": ["empty_args"]}
    empty = "<|channel|>commentary to=functions.empty_args <|constrain|>json<|message|>{}"
    assert fc.grammar_accepts("gpt_oss", GRAMMAR_TOOLS, ANALYSIS + two)
    assert fc.grammar_accepts("gpt_oss", GRAMMAR_TOOLS, ANALYSIS + CALL, tool_choice="required")
    assert fc.grammar_accepts("gpt_oss", GRAMMAR_TOOLS, two, tool_choice="required")
    assert not fc.grammar_accepts("gpt_oss", GRAMMAR_TOOLS, ANALYSIS + FINAL, tool_choice="required")
    assert not fc.grammar_accepts("gpt_oss", GRAMMAR_TOOLS, ANALYSIS.removesuffix("<|start|>assistant"),
                               tool_choice="required")
    assert not fc.grammar_accepts("gpt_oss", GRAMMAR_TOOLS, two, parallel=False)
    assert not fc.grammar_accepts("gpt_oss", GRAMMAR_TOOLS, two, tool_choice="required", parallel=False)
    assert fc.grammar_accepts("gpt_oss", GRAMMAR_TOOLS, ANALYSIS + CALL + "<|call|>", tool_choice=named)
    assert not fc.grammar_accepts("gpt_oss", GRAMMAR_TOOLS, two, tool_choice=named)
    assert not fc.grammar_accepts("gpt_oss", GRAMMAR_TOOLS, empty, tool_choice=named)
    assert not fc.grammar_accepts("gpt_oss", GRAMMAR_TOOLS, FINAL, tool_choice=named)
    assert fc.grammar_accepts("gpt_oss", GRAMMAR_TOOLS, empty, tool_choice=allowed)
    assert not fc.grammar_accepts("gpt_oss", GRAMMAR_TOOLS, CALL, tool_choice=allowed)


def _accepts(constraint: Any, text: str) -> bool:
    """Whether a structural-tag constraint lets a model write exactly ``text`` and end (characters)."""
    import xgrammar as xgr

    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_structural_tag(json.dumps(constraint.value))
    matcher = xgr.GrammarMatcher(compiled)
    return matcher.accept_string(text) and matcher.is_completed()


def test_grammar_after_the_reasoning_parsers_prefix() -> None:
    """With ``--reasoning-parser openai_gptoss`` the constraint starts with that parser's block (the first
    analysis message); the family's part then opens with ``<|start|>assistant``."""
    from reasoning_parsers import get_reasoning_parser
    from server.structured.constraints import ReasoningSpec, constraint_from_request

    rp = get_reasoning_parser("openai_gptoss")
    spec = ReasoningSpec(start=rp.start, end=rp.end, starts_open=rp.starts_open)
    for choice in ("auto", "required"):
        c = constraint_from_request(response_format=None, structured_outputs=None,
                                    tools=tool_spec_of(GRAMMAR_TOOLS, choice), tool_format="gpt_oss", reasoning=spec)
        assert c is not None
        assert _accepts(c, ANALYSIS + CALL) and _accepts(c, CALL)
        assert not _accepts(c, ANALYSIS + CALL.replace('"Paris"', "1"))
        assert _accepts(c, ANALYSIS + FINAL) == (choice == "auto")


# --- the template: gpt-oss's own, against openai_harmony's rendering ----------------------------------

WEATHER = {"type": "function", "function": {"name": "get_current_weather", "description": "Get the current weather",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string", "description": "The city name"}},
                                                "required": ["city"]}}}
HISTORY = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_current_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]


def _harmony_reference() -> str:
    """The same conversation as openai_harmony renders it for completion (gpt-oss's reference)."""
    from openai_harmony import (
        Conversation,
        DeveloperContent,
        HarmonyEncodingName,
        Message,
        ReasoningEffort,
        Role,
        SystemContent,
        ToolDescription,
        load_harmony_encoding,
    )

    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    system = SystemContent.new().with_reasoning_effort(ReasoningEffort.MEDIUM).with_conversation_start_date("2026-01-01")
    developer = DeveloperContent.new().with_instructions("Answer briefly.").with_function_tools([
        ToolDescription.new("get_current_weather", "Get the current weather", parameters=WEATHER["function"]["parameters"])])
    convo = Conversation.from_messages([
        Message.from_role_and_content(Role.SYSTEM, system),
        Message.from_role_and_content(Role.DEVELOPER, developer),
        Message.from_role_and_content(Role.USER, "Weather in Paris?"),
        Message.from_role_and_content(Role.ASSISTANT, '{"city": "Paris"}').with_channel("commentary")
        .with_recipient("functions.get_current_weather").with_content_type("<|constrain|>json"),
        Message.from_author_and_content(_tool_author(), '"sunny"').with_channel("commentary")
        .with_recipient("assistant"),
    ])
    return enc.decode(enc.render_conversation_for_completion(convo, Role.ASSISTANT))


def _tool_author() -> Any:
    from openai_harmony import Author, Role

    return Author.new(Role.TOOL, "functions.get_current_weather")


def _render_template() -> str:
    from server.chat.render import ChatRenderer

    path = fc.TEMPLATES / "gpt_oss.jinja"
    renderer = ChatRenderer(template_name=f"file:{path}", template_source=path.read_text(encoding="utf-8"))
    return renderer.render(HISTORY, tools=[WEATHER], add_generation_prompt=True)


def _canon(text: str) -> list[str]:
    """Messages, with what legitimately differs made equal: the date line, and how a call's header
    and a tool result's header spell the recipient and type (the template writes ``to=`` before
    ``<|channel|>``, and ``json`` for ``<|constrain|>json``); Harmony allows both."""
    import re

    text = re.sub(r"Current date: \d{4}-\d\d-\d\d", "Current date: D", text)
    text = re.sub(r"<\|start\|>assistant to=(\S+?)<\|channel\|>commentary json",
                  r"<|start|>assistant<|channel|>commentary to=\1 <|constrain|>json", text)
    text = re.sub(r"<\|start\|>(functions\.\S+?) to=assistant<\|channel\|>commentary",
                  r"<|start|>\1<|channel|>commentary to=assistant", text)
    return text.split("<|start|>")


def test_template_renders_the_conversation_as_harmony_does() -> None:
    ours, reference = _canon(_render_template()), _canon(_harmony_reference())
    assert ours == reference


# --- end to end: gpt-oss's template, the scripted engine, the server's grammar and parsers ---------------

@pytest.fixture
def app(make_app: Any, hf_model_dir: Any) -> Any:
    """No gpt-oss tokenizer in HF form offline: SmolLM2's stands in (the markers are then plain text)."""
    return fc.family_app(make_app, hf_model_dir, template=str(fc.TEMPLATES / "gpt_oss.jinja"), parser="gpt_oss",
                      reasoning="openai_gptoss")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_end_to_end_through_the_template_and_fake_engine(app: Any, grammar_cache: Any, stream: bool,
                                                         choice: str) -> None:
    case = {"auto": "preamble_then_call", "required": "multiple_tools", "named": "recipient_before_channel"}[choice]
    tool_choice = {"type": "function", "function": {"name": "get_current_weather"}} if choice == "named" else choice
    built = app(fc.pieces(CALLS[case]))
    body = {"messages": [{"role": "user", "content": "Go."}], "tools": TOOLS, "tool_choice": tool_choice,
            "max_tokens": 1500}
    content, calls = fc.reply_calls(built.client(), body, stream=stream)
    assert calls == [(c["name"], c["arguments"]) for c in EXPECT[case]["tool_calls"]]
    assert content == EXPECT[case]["content"]
    request = built.engine.requests[-1]
    assert request.constraint.kind == "structural_tag" and grammar_cache.compile(request.constraint).ok
    prompt = built.engine.tokenizer.decode(request.prompt_token_ids)
    assert prompt.startswith("<|start|>system<|message|>") and prompt.endswith("<|start|>assistant")
    assert "type get_current_weather = (_: {" in prompt


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_comes_back_beside_the_call(app: Any, stream: bool) -> None:
    from tests.unit._front import events, stream_raw

    text = CALLS["preamble_then_call"]
    built = app(fc.pieces(text, 3))
    body = {"messages": [{"role": "user", "content": "Weather?"}], "tools": TOOLS}
    if stream:
        reasoning = ""
        for event in events(stream_raw(built.client(), **body)):
            if event != "[DONE]" and event["choices"]:
                reasoning += event["choices"][0]["delta"].get("reasoning_content") or ""
        finish = None
    else:
        r = built.client().post(CHAT, json=body)
        assert r.status_code == 200, r.text
        msg = r.json()["choices"][0]["message"]
        reasoning, finish = msg["reasoning_content"], r.json()["choices"][0]["finish_reason"]
        assert [c["function"]["name"] for c in msg["tool_calls"]] == ["get_current_weather"]
        assert finish == "tool_calls"
    assert reasoning == EXPECT["preamble_then_call"]["reasoning"]


def test_an_answer_without_tools_is_parsed_from_its_channels(app: Any) -> None:
    """Harmony's channels are the message: the family's parser reads answers to requests without tools too."""
    built = app(fc.pieces(CALLS["two_analysis_messages"]))
    r = built.client().post(CHAT, json={"messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    assert (msg["content"], msg["reasoning_content"], msg["tool_calls"]) == ("Done.", "First. Second.", None)


def test_multi_turn_history_renders_calls_and_results(app: Any) -> None:
    built = app(["<|channel|>final<|message|>It is sunny in Paris."])
    content, prompt = fc.answer_and_prompt(built, HISTORY, [WEATHER])
    assert content == "It is sunny in Paris."
    assert ('<|start|>assistant to=functions.get_current_weather<|channel|>commentary json<|message|>'
            '{"city": "Paris"}<|call|>') in prompt
    assert '<|start|>functions.get_current_weather to=assistant<|channel|>commentary<|message|>"sunny"<|end|>' in prompt
    # the history call the template wrote parses back to the same call
    call = prompt[prompt.index(" to=functions."):prompt.index("<|call|>") + len("<|call|>")]
    parsed = get_tool_parser("gpt_oss").parse(call, final=True)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [("get_current_weather", {"city": "Paris"})]


def test_responses_api_returns_reasoning_and_the_call(app: Any) -> None:
    built = app(fc.pieces(CALLS["preamble_then_call"]))
    tools = [{"type": "function", **WEATHER["function"]}]
    r = built.client().post("/v1/responses", json={"input": "Weather in Paris?", "tools": tools})
    assert r.status_code == 200, r.text
    items = r.json()["output"]
    kinds = [i["type"] for i in items]
    assert "reasoning" in kinds and kinds[-1] == "function_call", kinds
    call = items[-1]
    assert call["name"] == "get_current_weather" and json.loads(call["arguments"]) == {"city": "Paris", "unit": "celsius"}


# --- structured outputs: the answer is the final message's body ----------------------------------------

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
          "additionalProperties": False}
JSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "w", "schema": SCHEMA, "strict": True}}


@pytest.mark.parametrize("tools", [None, GRAMMAR_TOOLS], ids=["no-tools", "auto-tools"])
def test_a_json_answer_is_framed_as_the_final_message(tools: list[dict[str, Any]] | None) -> None:
    from server.structured.constraints import constraint_from_request

    c = constraint_from_request(response_format=JSON_FORMAT, structured_outputs=None,
                                tools=tool_spec_of(tools or [], "auto" if tools else None), tool_format="gpt_oss")
    assert c is not None and c.kind == "structural_tag"
    assert _accepts(c, ANALYSIS + '<|channel|>final<|message|>{"city": "Paris"}<|return|>')
    assert _accepts(c, '<|channel|>final <|constrain|>json<|message|>{"city": "Paris"}')
    assert not _accepts(c, '{"city": "Paris"}'), "the answer is a message, not bare text"
    assert not _accepts(c, ANALYSIS + '<|channel|>final<|message|>{"city": 1}')
    assert not _accepts(c, ANALYSIS + "<|channel|>final<|message|>Paris.")
    assert _accepts(c, ANALYSIS + CALL) == (tools is not None)


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_answer_end_to_end(app: Any, grammar_cache: Any, stream: bool) -> None:
    from tests.unit._front import events, stream_raw

    built = app(fc.pieces(ANALYSIS + '<|channel|>final<|message|>{"city": "Paris"}'))
    body = {"messages": [{"role": "user", "content": "Capital of France as JSON."}], "response_format": JSON_FORMAT}
    if stream:
        content = reasoning = ""
        for event in events(stream_raw(built.client(), **body)):
            if event != "[DONE]" and event["choices"]:
                delta = event["choices"][0]["delta"]
                content += delta.get("content") or ""
                reasoning += delta.get("reasoning_content") or ""
    else:
        r = built.client().post(CHAT, json=body)
        assert r.status_code == 200, r.text
        msg = r.json()["choices"][0]["message"]
        content, reasoning = msg["content"], msg["reasoning_content"]
    assert json.loads(content) == {"city": "Paris"}
    assert reasoning == "The user wants the weather; call get_current_weather."
    request = built.engine.requests[-1]
    assert request.constraint.kind == "structural_tag" and grammar_cache.compile(request.constraint).ok
    assert "<|channel|>final<|message|>" in json.dumps(request.constraint.value)


# --- the grammar over gpt-oss's own vocabulary ------------------------------------------------------------

@pytest.fixture(scope="module")
def harmony_compiler() -> Any:
    """XGrammar over o200k_harmony (openai_harmony, offline): Harmony's markers are single special tokens
    there, and <|return|> / <|call|> stop generation. Tokens that are byte fragments
    (not UTF-8 alone) are left empty: the texts below do not need them."""
    import xgrammar as xgr
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    vocab = []
    for i in range(201088):
        try:
            vocab.append(enc.decode_utf8([i]).encode())
        except Exception:  # a byte fragment
            vocab.append(b"")
    stops = sorted(enc.stop_tokens_for_assistant_actions())  # <|return|>, <|call|>: what vLLM stops gpt-oss at
    info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.RAW, vocab_size=len(vocab), stop_token_ids=stops)
    return enc, xgr.GrammarCompiler(info)


@pytest.mark.parametrize("choice,text,stop,ok", [
    ("auto", ANALYSIS + CALL, "<|call|>", True),
    ("required", ANALYSIS + CALL, "<|call|>", True),
    ("auto", ANALYSIS + "<|channel|>final<|message|>Sunny.", "<|return|>", True),
    ("required", ANALYSIS + "<|channel|>final<|message|>Sunny.", "<|return|>", False),  # a call was required
    ("required", ANALYSIS + CALL.replace('"Paris"', "1"), "<|call|>", False),  # schema-breaking
    ("required", ANALYSIS.removesuffix("<|start|>assistant"), "<|call|>", False),  # stopped before any call
])
def test_grammar_over_the_real_vocabulary(harmony_compiler: Any, choice: str, text: str, stop: str, ok: bool) -> None:
    """The model's real token ids (markers as special tokens) pass the server's grammar, and the stop token
    ends the turn right after a call or the final message, as the engine stops at <|call|> / <|return|>."""
    import xgrammar as xgr

    from server.structured.constraints import constraint_from_request

    enc, compiler = harmony_compiler
    c = constraint_from_request(response_format=None, structured_outputs=None,
                                tools=tool_spec_of(GRAMMAR_TOOLS, choice), tool_format="gpt_oss")
    assert c is not None
    matcher = xgr.GrammarMatcher(compiler.compile_structural_tag(json.dumps(c.value)))
    ids = enc.encode(text + stop, allowed_special="all")
    assert all(enc.is_special_token(i) for i in enc.encode("<|channel|><|message|><|end|><|start|>", allowed_special="all"))
    accepted = all(matcher.accept_token(i) for i in ids)
    assert (accepted and matcher.is_terminated()) == ok


def test_without_a_reasoning_parser_analysis_never_reaches_content(make_app: Any, hf_model_dir: Any) -> None:
    """Started without a reasoning parser (``--reasoning-parser`` unset), the analysis is still not content."""
    build = fc.family_app(make_app, hf_model_dir, template=str(fc.TEMPLATES / "gpt_oss.jinja"), parser="openai")
    built = build(fc.pieces(CALLS["two_analysis_messages"]))
    r = built.client().post(CHAT, json={"messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    assert msg["content"] == "Done." and "reasoning_content" not in msg
