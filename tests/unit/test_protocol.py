"""The request models: what they accept, what they refuse and where the error points."""
from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from server.errors import validation_error
from server.protocol import ChatCompletionRequest, ChatMessage, CompletionRequest, usage_dict

USER = [{"role": "user", "content": "Hi"}]


def _chat(**kw: Any) -> ChatCompletionRequest:
    kw.setdefault("messages", USER)
    return ChatCompletionRequest.model_validate(kw)


def _param(exc: pytest.ExceptionInfo) -> str | None:
    return validation_error(list(exc.value.errors())).param


def test_defaults():
    r = _chat()
    assert (r.n, r.stream, r.logprobs, r.top_logprobs, r.parallel_tool_calls) == (1, False, False, None, True)
    assert r.requested_max_tokens() is None and r.stop_list() == ()
    assert r.tools is None and r.tool_choice is None and r.response_format is None


def test_max_completion_tokens_preferred():
    assert _chat(max_tokens=10, max_completion_tokens=4).requested_max_tokens() == 4
    assert _chat(max_tokens=10).requested_max_tokens() == 10


@pytest.mark.parametrize("stop, expected", [(None, ()), ("x", ("x",)), (["a", "b"], ("a", "b"))])
def test_stop_list(stop, expected):
    assert _chat(stop=stop).stop_list() == expected


def test_extra_fields_kept_not_refused():
    r = _chat(vendor={"a": 1})
    assert r.model_extra == {"vendor": {"a": 1}}


@pytest.mark.parametrize("field, value", [
    ("temperature", 2.01), ("top_p", 0.0), ("n", 0), ("n", 17), ("presence_penalty", 2.5),
    ("frequency_penalty", -2.5), ("max_tokens", 0), ("top_logprobs", -1), ("max_reasoning_tokens", -1),
])
def test_ranges(field, value):
    kw: dict[str, Any] = {field: value}
    if field == "top_logprobs":
        kw["logprobs"] = True
    with pytest.raises(ValidationError) as exc:
        _chat(**kw)
    assert _param(exc) == field


@pytest.mark.parametrize("field, value", [("temperature", 0.0), ("temperature", 2.0), ("top_p", 1.0),
                                          ("n", 16), ("presence_penalty", -2.0), ("top_logprobs", 20)])
def test_range_edges_accepted(field, value):
    kw: dict[str, Any] = {field: value}
    if field == "top_logprobs":
        kw["logprobs"] = True
    assert getattr(_chat(**kw), field) == value


def test_stop_limits():
    assert _chat(stop=["a", "b", "c", "d"]).stop_list() == ("a", "b", "c", "d")
    with pytest.raises(ValidationError) as exc:
        _chat(stop=["a", "b", "c", "d", "e"])
    assert _param(exc) == "stop"
    with pytest.raises(ValidationError):
        _chat(stop=[""])


def test_top_logprobs_needs_logprobs():
    with pytest.raises(ValidationError, match="requires 'logprobs'"):
        _chat(top_logprobs=1)
    assert _chat(top_logprobs=1, logprobs=True).top_logprobs == 1


def test_messages_required_and_non_empty():
    with pytest.raises(ValidationError) as exc:
        ChatCompletionRequest.model_validate({})
    assert exc.value.errors()[0]["type"] == "missing" and _param(exc) == "messages"
    with pytest.raises(ValidationError) as exc:
        _chat(messages=[])
    assert _param(exc) == "messages"


@pytest.mark.parametrize("msg, fragment", [
    ({"role": "tool", "content": "x"}, "tool_call_id"),
    ({"role": "user"}, "content"),
    ({"role": "system", "content": None}, "content"),
    ({"role": "user", "content": [{"type": "input_audio"}]}, "input_audio"),
    ({"role": "narrator", "content": "x"}, "role"),
])
def test_bad_messages(msg, fragment):
    with pytest.raises(ValidationError) as exc:
        _chat(messages=[msg])
    assert fragment in str(exc.value)
    assert _param(exc).startswith("messages[0]")


def test_good_messages():
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "developer", "content": "d"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "assistant", "content": "ok", "reasoning_content": "thought"},
    ]
    r = _chat(messages=msgs)
    assert [m.role for m in r.messages] == ["system", "developer", "user", "assistant", "tool", "assistant"]
    assert r.messages[3].tool_calls[0].function.arguments == "{\"a\": 1}"


def test_assistant_arguments_may_be_object():
    m = ChatMessage.model_validate({"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]})
    assert m.tool_calls[0].function.arguments == {"a": 1}
    assert m.tool_calls[0].id is None


def test_tools_and_tool_choice():
    tool = {"type": "function", "function": {"name": "get.weather-2", "parameters": {"type": "object"}}}
    r = _chat(tools=[tool], tool_choice={"type": "function", "function": {"name": "get.weather-2"}})
    assert r.tools[0].function.name == "get.weather-2"
    assert r.tool_choice.function.name == "get.weather-2"
    for choice in ("none", "auto", "required"):
        assert _chat(tools=[tool], tool_choice=choice).tool_choice == choice
    with pytest.raises(ValidationError):
        _chat(tools=[tool], tool_choice="sometimes")
    with pytest.raises(ValidationError):
        _chat(tools=[{"type": "retrieval", "function": {"name": "x"}}])


@pytest.mark.parametrize("name", ["", "a b", "x" * 65, "naïve", "a/b"])
def test_tool_name_pattern(name):
    with pytest.raises(ValidationError) as exc:
        _chat(tools=[{"type": "function", "function": {"name": name}}])
    assert _param(exc) == "tools[0].function.name"


def test_duplicate_tool_names():
    t = {"type": "function", "function": {"name": "f"}}
    with pytest.raises(ValidationError, match="repeated: f"):
        _chat(tools=[t, t])


def test_response_format():
    r = _chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"},
                                                                      "strict": True}})
    assert r.response_format.json_schema.schema_ == {"type": "object"}
    assert r.response_format.json_schema.strict is True
    dumped = r.response_format.model_dump(by_alias=True, exclude_none=True)
    assert dumped["json_schema"]["schema"] == {"type": "object"}
    assert _chat(response_format={"type": "json_object"}).response_format.json_schema is None
    # as OpenAI: a json_schema without a schema is accepted (any JSON object); without json_schema it is not
    assert _chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}}).response_format.json_schema
    with pytest.raises(ValidationError, match="needs 'json_schema'"):
        _chat(response_format={"type": "json_schema"})


def test_structured_outputs_aliases():
    r = _chat(structured_outputs={"json": {"type": "string"}})
    assert r.structured_outputs.json_ == {"type": "string"}
    assert r.structured_outputs.model_dump(by_alias=True, exclude_none=True) == {"json": {"type": "string"}}
    assert _chat(structured_outputs={"choice": ["a", "b"]}).structured_outputs.choice == ["a", "b"]


def test_stream_options():
    assert _chat(stream=True, stream_options={"include_usage": True}).stream_options.include_usage is True
    assert _chat(stream=True, stream_options={}).stream_options.include_usage is False


def test_completion_request():
    r = CompletionRequest.model_validate({"prompt": "x"})
    assert r.max_tokens == 16 and r.echo is False and r.logprobs is None
    assert CompletionRequest.model_validate({"prompt": [1, 2, 3]}).prompt == [1, 2, 3]
    assert CompletionRequest.model_validate({"prompt": ["a", "b"]}).prompt == ["a", "b"]
    for bad in ({"prompt": ""}, {"prompt": []}, {}, {"prompt": "x", "logprobs": 6}, {"prompt": "x", "n": 0}):
        with pytest.raises(ValidationError):
            CompletionRequest.model_validate(bad)


def test_usage_dict():
    assert usage_dict(3, 4) == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    assert usage_dict(3, 4, 2)["completion_tokens_details"] == {"reasoning_tokens": 2}
    assert usage_dict(0, 0, 0)["completion_tokens_details"] == {"reasoning_tokens": 0}
