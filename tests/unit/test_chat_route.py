"""server/api/routes/chat.py: the chat API over HTTP (server/plan: build, run loop, chat framer):
messages, streams, tool calls, reasoning, constraint wiring."""
from __future__ import annotations

import json
import re
from typing import Any

import pytest

from server.config import Settings
from server.engine.fake import CharTokenizer
from tests.sse_validator import validate_sse
from tests.unit._front import (
    HELLO, TIME_TOOL, USER, WEATHER_SCRIPT, WEATHER_TOOL, chat as _chat, events as _events, script as _script,
    stream_raw as _stream_raw,
)


# --------------------------------------------------------------------------- chat, non-stream


def test_chat_body_shape(make_app):
    b = make_app()
    r = _chat(b.client(), model="fake-model", max_tokens=50)
    assert r.status_code == 200
    body = r.json()
    assert re.fullmatch(r"chatcmpl-[0-9a-f]+", body["id"])
    assert body["object"] == "chat.completion"
    assert isinstance(body["created"], int) and body["created"] > 1_600_000_000
    assert body["model"] == "fake-model"
    [choice] = body["choices"]
    assert choice["index"] == 0
    assert choice["message"] == {"role": "assistant", "content": HELLO, "tool_calls": None, "refusal": None}
    assert choice["finish_reason"] == "stop"
    assert choice["logprobs"] is None
    prompt_tokens = len(b.engine.requests[-1].prompt_token_ids)
    assert body["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": len(HELLO),
                             "total_tokens": prompt_tokens + len(HELLO)}
    # the prompt is the hermes template's rendering, counted by the engine's tokenizer
    prompt = CharTokenizer().decode(b.engine.requests[-1].prompt_token_ids)
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nHi<|im_end|>" in prompt


def test_chat_model_may_be_omitted(make_app):
    r = _chat(make_app().client())
    assert r.status_code == 200 and r.json()["model"] == "fake-model"


def test_chat_n2(make_app):
    b = make_app()
    body = _chat(b.client(), n=2, max_tokens=50).json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert all(c["message"]["content"] == HELLO and c["finish_reason"] == "stop" for c in body["choices"])
    assert body["usage"]["completion_tokens"] == 2 * len(HELLO)
    assert b.engine.requests[-1].sampling.n == 2


def test_chat_max_tokens_length(make_app):
    b = make_app()
    body = _chat(b.client(), max_tokens=7).json()
    [choice] = body["choices"]
    assert choice["message"]["content"] == "Hello w"
    assert choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 7
    assert b.engine.requests[-1].sampling.max_tokens == 7


def test_chat_max_completion_tokens_wins(make_app):
    b = make_app()
    body = _chat(b.client(), max_completion_tokens=3, max_tokens=9).json()
    assert body["choices"][0]["message"]["content"] == "Hel"
    assert b.engine.requests[-1].sampling.max_tokens == 3


def test_chat_default_max_tokens_is_rest_of_context(make_app):
    b = make_app(max_model_len=1000)
    _chat(b.client())
    req = b.engine.requests[-1]
    assert req.sampling.max_tokens == 1000 - len(req.prompt_token_ids)


def test_chat_sampling_passed_to_engine(make_app):
    b = make_app()
    _chat(b.client(), temperature=0.5, top_p=0.9, seed=7, stop=["x", "y"], presence_penalty=1.0,
          frequency_penalty=-1.0, max_tokens=5)
    s = b.engine.requests[-1].sampling
    assert (s.temperature, s.top_p, s.seed, s.stop, s.presence_penalty, s.frequency_penalty) == (
        0.5, 0.9, 7, ("x", "y"), 1.0, -1.0)
    assert s.logprobs is None


def test_chat_logprobs_shape(make_app):
    b = make_app()
    body = _chat(b.client(), logprobs=True, top_logprobs=2, max_tokens=50).json()
    assert b.engine.requests[-1].sampling.logprobs == 2
    lp = body["choices"][0]["logprobs"]
    assert set(lp) == {"content", "refusal"}
    assert [e["token"] for e in lp["content"]] == list(HELLO)
    for e in lp["content"]:
        assert set(e) == {"token", "logprob", "bytes", "top_logprobs"}
        assert e["logprob"] == -0.5
        assert e["bytes"] == list(e["token"].encode())
        assert e["top_logprobs"] == []


def test_chat_logprobs_off_means_engine_off(make_app):
    b = make_app()
    _chat(b.client(), logprobs=False, max_tokens=5)
    assert b.engine.requests[-1].sampling.logprobs is None


# --------------------------------------------------------------------------- chat, stream


def test_stream_framing_and_equals_non_stream(make_app):
    b = make_app()
    c = b.client()
    raw = _stream_raw(c, max_tokens=50)
    r = validate_sse(raw, expect_usage=False, n=1)
    assert r.content[0] == HELLO == _chat(c, max_tokens=50).json()["choices"][0]["message"]["content"]
    assert r.finish_reason == {0: "stop"}
    assert r.model == "fake-model"
    events = _events(raw)
    assert events[-1] == "[DONE]"
    first = events[0]
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert len({e["id"] for e in events[:-1]}) == 1
    assert all("usage" not in e or e["usage"] is None for e in events[:-1])
    finish = [e for e in events[:-1] if e["choices"] and e["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and finish[0] is events[-2]


def test_stream_include_usage(make_app):
    b = make_app()
    raw = _stream_raw(b.client(), max_tokens=50, stream_options={"include_usage": True})
    r = validate_sse(raw, expect_usage=True, n=1)
    events = _events(raw)
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == []
    prompt_tokens = len(b.engine.requests[-1].prompt_token_ids)
    assert usage_chunk["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": len(HELLO),
                                    "total_tokens": prompt_tokens + len(HELLO)}
    assert r.usage == usage_chunk["usage"]


def test_stream_include_usage_false_sends_no_usage(make_app):
    raw = _stream_raw(make_app().client(), max_tokens=50, stream_options={"include_usage": False})
    validate_sse(raw, expect_usage=False, n=1)


def test_stream_n2_and_length(make_app):
    b = make_app()
    raw = _stream_raw(b.client(), n=2, max_tokens=7, stream_options={"include_usage": True})
    r = validate_sse(raw, expect_usage=True, n=2)
    assert r.content == {0: "Hello w", 1: "Hello w"}
    assert r.finish_reason == {0: "length", 1: "length"}
    assert r.usage["completion_tokens"] == 14


def test_stream_logprobs(make_app):
    raw = _stream_raw(make_app().client(), logprobs=True, max_tokens=50)
    validate_sse(raw, n=1)
    tokens = [e["token"] for ev in _events(raw)[:-1] for ch in ev["choices"]
              if ch.get("logprobs") for e in ch["logprobs"]["content"]]
    assert "".join(tokens) == HELLO


def test_stream_marker_prefix_held_back_then_released(make_app):
    # "<tool" may start a tool call: held back, then released as content when it is not one.
    b = make_app(script=_script(["A <to", "ol> B"]))
    raw = _stream_raw(b.client(), tools=[WEATHER_TOOL], max_tokens=50)
    r = validate_sse(raw, n=1)
    assert r.content[0] == "A <tool> B"
    assert r.finish_reason == {0: "stop"}


# --------------------------------------------------------------------------- tool calls


def test_tool_call_non_stream(make_app):
    b = make_app(script=_script(WEATHER_SCRIPT))
    body = _chat(b.client(), tools=[WEATHER_TOOL], max_tokens=200).json()
    [choice] = body["choices"]
    assert choice["finish_reason"] == "tool_calls"
    msg = choice["message"]
    assert msg["content"] is None and msg["role"] == "assistant"
    [call] = msg["tool_calls"]
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", call["id"])
    assert call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert isinstance(call["function"]["arguments"], str)
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    # tools are rendered into the prompt, and tool_choice auto is grammar-constrained
    prompt = CharTokenizer().decode(b.engine.requests[-1].prompt_token_ids)
    assert "get_weather" in prompt and "<tools>" in prompt
    assert b.engine.requests[-1].constraint is not None


def test_tool_call_stream_deltas(make_app):
    b = make_app(script=_script(WEATHER_SCRIPT))
    c = b.client()
    raw = _stream_raw(c, tools=[WEATHER_TOOL], max_tokens=200)
    r = validate_sse(raw, n=1)
    assert r.finish_reason == {0: "tool_calls"}
    assert 0 not in r.content
    entries = [tc for ev in _events(raw)[:-1] for ch in ev["choices"]
               for tc in (ch["delta"].get("tool_calls") or [])]
    head, *rest = entries
    assert head["index"] == 0 and head["type"] == "function" and head["id"].startswith("call_")
    assert head["function"] == {"name": "get_weather", "arguments": ""}
    assert rest and all(set(tc) == {"index", "function"} and set(tc["function"]) == {"arguments"}
                        for tc in rest)
    streamed = r.tool_calls[0][0]["arguments"]
    non_stream = _chat(c, tools=[WEATHER_TOOL], max_tokens=200).json()["choices"][0]["message"]
    assert streamed == non_stream["tool_calls"][0]["function"]["arguments"]
    assert json.loads(streamed) == {"city": "Paris"}


def test_tool_call_stream_arguments_grow_over_several_chunks(make_app):
    b = make_app(script=_script(WEATHER_SCRIPT))
    raw = _stream_raw(b.client(), tools=[WEATHER_TOOL], max_tokens=200)
    fragments = [tc["function"]["arguments"] for ev in _events(raw)[:-1] for ch in ev["choices"]
                 for tc in (ch["delta"].get("tool_calls") or []) if "id" not in tc]
    assert len([f for f in fragments if f]) >= 2  # "Par" then "is" arrive in different chunks


def test_tool_call_parameterless(make_app):
    script = _script(['<tool_call>\n{"name": "get_time"}\n</tool_call>'])
    b = make_app(script=script)
    c = b.client()
    msg = _chat(c, tools=[TIME_TOOL], max_tokens=200).json()["choices"][0]["message"]
    assert msg["tool_calls"][0]["function"] == {"name": "get_time", "arguments": "{}"}
    r = validate_sse(_stream_raw(c, tools=[TIME_TOOL], max_tokens=200), n=1)
    assert r.tool_calls[0][0]["name"] == "get_time" and r.tool_calls[0][0]["arguments"] == "{}"


def test_two_tool_calls_in_one_chunk(make_app):
    text = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
    b = make_app(script=_script([text]))
    c = b.client()
    tools = [WEATHER_TOOL, TIME_TOOL]
    body = _chat(c, tools=tools, max_tokens=500).json()
    calls = body["choices"][0]["message"]["tool_calls"]
    assert [(x["function"]["name"], json.loads(x["function"]["arguments"])) for x in calls] == [
        ("get_weather", {"city": "Oslo"}), ("get_time", {})]
    assert len({x["id"] for x in calls}) == 2
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    raw = _stream_raw(c, tools=tools, max_tokens=500)
    r = validate_sse(raw, n=1)
    assert [(v["name"], json.loads(v["arguments"])) for _, v in sorted(r.tool_calls[0].items())] == [
        ("get_weather", {"city": "Oslo"}), ("get_time", {})]
    assert r.finish_reason == {0: "tool_calls"}
    # one SSE chunk per tool-call delta entry, as OpenAI's recorded streams do
    per_chunk = [len(ch["delta"].get("tool_calls") or []) for ev in _events(raw)[:-1] for ch in ev["choices"]]
    assert max(per_chunk) == 1 and sum(per_chunk) == 4


def test_unknown_tool_name_dropped(make_app):
    script = _script(['<tool_call>\n{"name": "launch_rockets", "arguments": {}}\n</tool_call>'])
    b = make_app(script=script)
    c = b.client()
    choice = _chat(c, tools=[WEATHER_TOOL], max_tokens=200).json()["choices"][0]
    assert not choice["message"]["tool_calls"]
    assert choice["finish_reason"] == "stop"
    assert "launch_rockets" not in json.dumps(choice["message"]["tool_calls"])
    raw = _stream_raw(c, tools=[WEATHER_TOOL], max_tokens=200)
    r = validate_sse(raw, n=1)
    assert not r.tool_calls.get(0) and r.finish_reason == {0: "stop"}


def test_tool_choice_none_not_rendered_no_constraint(make_app):
    b = make_app(script=_script(WEATHER_SCRIPT))
    body = _chat(b.client(), tools=[WEATHER_TOOL], tool_choice="none", max_tokens=200).json()
    req = b.engine.requests[-1]
    assert "get_weather" not in CharTokenizer().decode(req.prompt_token_ids)
    assert req.constraint is None
    # with tools off the text is plain content, not parsed as a call
    msg = body["choices"][0]["message"]
    assert msg["tool_calls"] is None and "<tool_call>" in msg["content"]
    assert body["choices"][0]["finish_reason"] == "stop"


def test_tool_call_text_without_tools_is_content(make_app):
    b = make_app(script=_script(WEATHER_SCRIPT))
    msg = _chat(b.client(), max_tokens=200).json()["choices"][0]["message"]
    assert msg["tool_calls"] is None and msg["content"] == "".join(WEATHER_SCRIPT)


def test_content_then_tool_call(make_app):
    b = make_app(script=_script(["Let me check. ", *WEATHER_SCRIPT]))
    c = b.client()
    msg = _chat(c, tools=[WEATHER_TOOL], max_tokens=200).json()["choices"][0]["message"]
    assert msg["content"].strip() == "Let me check."
    assert msg["tool_calls"][0]["function"]["name"] == "get_weather"
    r = validate_sse(_stream_raw(c, tools=[WEATHER_TOOL], max_tokens=200), n=1)
    assert r.content[0].strip() == "Let me check." and r.finish_reason == {0: "tool_calls"}


# --------------------------------------------------------------------------- reasoning


THINK_SCRIPT = ["<think>", "hm", "m</think>", "Answer"]


def test_reasoning_split_non_stream(make_app):
    b = make_app(script=_script(THINK_SCRIPT), reasoning_parser="qwen3")
    body = _chat(b.client(), max_tokens=100).json()
    msg = body["choices"][0]["message"]
    assert msg["reasoning_content"] == "hmm" and msg["content"] == "Answer"
    assert body["usage"]["completion_tokens"] == len("".join(THINK_SCRIPT))
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}


def test_reasoning_split_stream(make_app):
    b = make_app(script=_script(THINK_SCRIPT), reasoning_parser="qwen3")
    raw = _stream_raw(b.client(), max_tokens=100, stream_options={"include_usage": True})
    r = validate_sse(raw, expect_usage=True, n=1)
    assert r.reasoning == {0: "hmm"} and r.content == {0: "Answer"}
    assert r.usage["completion_tokens_details"] == {"reasoning_tokens": 3}


def test_reasoning_field_both(make_app):
    b = make_app(script=_script(THINK_SCRIPT), reasoning_parser="qwen3",
                 settings=Settings(reasoning_field="both"))
    msg = _chat(b.client(), max_tokens=100).json()["choices"][0]["message"]
    assert msg["reasoning_content"] == msg["reasoning"] == "hmm"


def test_no_reasoning_parser_keeps_think_text(make_app):
    b = make_app(script=_script(THINK_SCRIPT))
    body = _chat(b.client(), max_tokens=100).json()
    assert body["choices"][0]["message"]["content"] == "".join(THINK_SCRIPT)
    assert "reasoning_content" not in body["choices"][0]["message"]
    assert "completion_tokens_details" not in body["usage"]


# --------------------------------------------------------------------------- constraint wiring


def _constraint(b: Any) -> Any:
    return b.engine.requests[-1].constraint


def test_no_constraint_for_plain_chat(make_app):
    b = make_app()
    _chat(b.client(), max_tokens=5)
    assert _constraint(b) is None


@pytest.mark.parametrize("extra, kind", [
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "p", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}}, "json"),
    ({"response_format": {"type": "json_object"}}, "json_object"),
    ({"structured_outputs": {"json": {"type": "object", "properties": {"a": {"type": "string"}}}}}, "json"),
    ({"structured_outputs": {"regex": "[a-z]{3}"}}, "regex"),
    ({"structured_outputs": {"choice": ["yes", "no"]}}, "choice"),
    ({"structured_outputs": {"grammar": 'root ::= "a" | "b"'}}, "grammar"),
    ({"tools": [WEATHER_TOOL], "tool_choice": "required"}, "structural_tag"),
    ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
     None),  # named: either a json or structural_tag constraint
])
def test_constraint_wiring(make_app, extra, kind):
    b = make_app(script=_script(['{"a": 1}']))
    r = _chat(b.client(), max_tokens=50, **extra)
    assert r.status_code == 200, r.json()
    con = _constraint(b)
    assert con is not None
    if kind is None:
        assert con.kind in ("json", "structural_tag")
    else:
        assert con.kind == kind


def test_constraint_json_schema_value(make_app):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    b = make_app(script=_script(['{"a": 1}']))
    r = _chat(b.client(), max_tokens=50,
              response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    assert r.status_code == 200
    value = _constraint(b).value
    value = json.loads(value) if isinstance(value, str) else value
    assert value["properties"] == schema["properties"] and value["required"] == ["a"]
    # non-strict schemas are validated after generation and the outcome reported
    assert r.headers["x-gramserve-schema-validated"] == "valid"


def test_non_strict_schema_mismatch_reported(make_app):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    b = make_app(script=_script(['{"a": "x"}']))
    r = _chat(b.client(), max_tokens=50,
              response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    assert r.status_code == 200 and r.headers["x-gramserve-schema-validated"] == "invalid"


def test_tool_constraints_off_auto_unconstrained(make_app):
    b = make_app(script=_script(WEATHER_SCRIPT), settings=Settings(tool_constraints=False))
    _chat(b.client(), tools=[WEATHER_TOOL], max_tokens=200)
    assert _constraint(b) is None


def test_completions_constraint(make_app):
    b = make_app(script=_script(["yes"]))
    r = b.client().post("/v1/completions", json={"prompt": "Q?", "structured_outputs": {"choice": ["yes", "no"]}})
    assert r.status_code == 200
    assert _constraint(b).kind == "choice"


def test_same_tools_again_reuse_the_checked_constraint(make_app, monkeypatch):
    """An agent's next turn with the same tools gets the remembered constraint without the checks
    running again; another property order is another grammar; a bad request is never remembered."""
    from server.structured import from_request

    checks: list[str] = []
    real = from_request.schema_limits
    def counted(limits, schema, *, param):
        checks.append(param)
        return real(limits, schema, param=param)

    monkeypatch.setattr(from_request, "schema_limits", counted)
    b = make_app(script=_script(WEATHER_SCRIPT))
    c = b.client()
    turn2 = USER + [{"role": "assistant", "content": "Which city?"}, {"role": "user", "content": "Paris"}]
    for messages in (USER, turn2):
        r = _chat(c, messages=messages, tools=[WEATHER_TOOL], tool_choice="required", max_tokens=200)
        assert r.status_code == 200
    first, second = b.engine.requests[-2].constraint, b.engine.requests[-1].constraint
    assert second is first and len(checks) == 1 and len(b.state.constraint_memo) == 1
    props = {"unit": {"enum": ["c", "f"]}, "city": {"type": "string"}}
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": props, "required": ["city"]}}}]
    reordered = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": dict(reversed(props.items())), "required": ["city"]}}}]
    assert _chat(c, tools=tools, tool_choice="required", max_tokens=200).status_code == 200
    assert _chat(c, tools=reordered, tool_choice="required", max_tokens=200).status_code == 200
    a, r = b.engine.requests[-2].constraint, b.engine.requests[-1].constraint
    assert a is not r and a.key != r.key and len(checks) == 3
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(b.state.settings.max_schema_depth + 2):
        deep = {"type": "object", "properties": {"x": deep}}
    bad = [{"type": "function", "function": {"name": "f", "parameters": deep}}]
    for _ in range(2):  # checked (and refused) every time
        r2 = _chat(c, tools=bad, tool_choice="required", max_tokens=20)
        assert r2.status_code == 400 and r2.json()["error"]["code"] == "schema_too_deep"
    assert len(checks) == 5 and len(b.state.constraint_memo) == 3


def _first_deltas(raw: str) -> list[dict[str, Any]]:
    return [e["choices"][0]["delta"] for e in _events(raw)[:2] if isinstance(e, dict) and e["choices"]]


def test_stream_opens_like_openai(make_app):
    """Role first; content null when the answer starts with a tool call (as OpenAI sends it)."""
    text = _stream_raw(make_app().client())
    assert _first_deltas(text)[0] == {"role": "assistant", "content": ""}
    b = make_app(script=_script(WEATHER_SCRIPT))
    first = _first_deltas(_stream_raw(b.client(), tools=[WEATHER_TOOL], tool_choice="required"))[0]
    assert first["role"] == "assistant" and first["content"] is None and first["tool_calls"][0]["id"]
    empty = make_app(script=_script([""]))  # an empty answer still opens with the role
    assert _first_deltas(_stream_raw(empty.client()))[0] == {"role": "assistant", "content": ""}


def test_json_schema_without_schema_is_any_object(make_app):
    b = make_app(script=_script(['{"a": 1}']))
    r = _chat(b.client(), max_tokens=20, response_format={"type": "json_schema", "json_schema": {"name": "x"}})
    assert r.status_code == 200 and b.engine.requests[-1].constraint.kind == "json_object"


def test_logit_bias_reaches_the_engine(make_app):
    b = make_app()
    assert _chat(b.client(), max_tokens=3, logit_bias={"65": 5.5, "66": -100}).status_code == 200
    assert dict(b.engine.requests[-1].sampling.logit_bias) == {65: 5.5, 66: -100.0}
    for bad in ({"x": 1}, {"65": 200}, {str(0x110000 + 1): 1}, {"-1": 1}):
        r = _chat(b.client(), max_tokens=3, logit_bias=bad)
        assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias", (bad, r.text)


def test_allowed_tools_calls_to_others_are_not_returned(make_app):
    b = make_app(script=_script(WEATHER_SCRIPT))
    allowed = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
        {"type": "function", "function": {"name": "get_time"}}]}}
    r = _chat(b.client(), max_tokens=200, tools=[WEATHER_TOOL, TIME_TOOL], tool_choice=allowed)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["tool_calls"] is None
    assert "get_time" in json.dumps(b.engine.requests[-1].constraint.value)
    bad = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "name": "nope"}]}}
    r = _chat(b.client(), max_tokens=5, tools=[WEATHER_TOOL], tool_choice=bad)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"


LEGACY_FN = {"name": "get_weather", "description": "Weather in a city",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def test_legacy_functions_answered_as_the_legacy_api(make_app):
    b = make_app(script=_script(WEATHER_SCRIPT))
    r = _chat(b.client(), max_tokens=200, functions=[LEGACY_FN], function_call={"name": "get_weather"})
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "function_call" and "tool_calls" not in choice["message"]
    assert choice["message"]["function_call"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert b.engine.requests[-1].constraint is not None  # the call is enforced like any tool call
    raw = _stream_raw(b.client(), max_tokens=200, functions=[LEGACY_FN])
    deltas = [e["choices"][0] for e in _events(raw) if isinstance(e, dict) and e["choices"]]
    name = "".join(d["delta"].get("function_call", {}).get("name") or "" for d in deltas)
    args = "".join(d["delta"].get("function_call", {}).get("arguments") or "" for d in deltas)
    assert name == "get_weather" and json.loads(args) == {"city": "Paris"}
    assert deltas[-1]["finish_reason"] == "function_call"


def test_legacy_history_and_mixing_rules(make_app):
    b = make_app()
    history = [{"role": "user", "content": "Weather?"},
               {"role": "assistant", "content": None, "function_call": {"name": "get_weather",
                                                                        "arguments": '{"city": "Paris"}'}},
               {"role": "function", "name": "get_weather", "content": "sunny"}]
    assert _chat(b.client(), messages=history, max_tokens=5, functions=[LEGACY_FN]).status_code == 200
    both = _chat(b.client(), max_tokens=5, functions=[LEGACY_FN], tools=[WEATHER_TOOL])
    assert both.status_code == 400 and "not both" in both.json()["error"]["message"]
    lone = _chat(b.client(), max_tokens=5, function_call="auto")
    assert lone.status_code == 400 and "needs 'functions'" in lone.json()["error"]["message"]
