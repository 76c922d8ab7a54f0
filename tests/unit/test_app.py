"""The HTTP front end end to end over ASGI, with the scripted FakeEngine (no vLLM).

FakeEngine counts one token per character and yields one chunk per scripted piece, so
every count below is exact. Errors live in test_errors.py, request models in
test_protocol.py.
"""
from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from server import metrics
from server.config import Settings
from server.engine.fake import CharTokenizer, FakeEngine
from tests.sse_validator import validate_sse

CHAT = "/v1/chat/completions"
HELLO = "Hello world!"  # FakeEngine's default script: "Hello", " world", "!"
USER = [{"role": "user", "content": "Hi"}]

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "description": "The time now"}}
WEATHER_SCRIPT = ["<tool", "_call>\n{\"name\": \"get_weather\", \"argu", "ments\": {\"city\": \"Par",
                  "is\"}}\n</tool_call>"]


def _script(pieces: list[str]):
    return lambda req: list(pieces)


def _chat(client: Any, **body: Any) -> Any:
    body.setdefault("messages", USER)
    return client.post(CHAT, json=body)


def _stream_raw(client: Any, **body: Any) -> str:
    body.setdefault("messages", USER)
    body["stream"] = True
    with client.stream("POST", CHAT, json=body) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return "".join(r.iter_text())


def _events(raw: str) -> list[Any]:
    out = []
    for block in raw.split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


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


# --------------------------------------------------------------------------- auth


@pytest.fixture
def keyed(make_app):
    return make_app(settings=Settings(api_keys=("k1", "k2")))


def test_auth_missing_key(keyed):
    r = _chat(keyed.client())
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert keyed.engine.requests == []


def test_auth_wrong_key(keyed):
    r = keyed.client().post(CHAT, json={"messages": USER}, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    r = keyed.client().post(CHAT, json={"messages": USER}, headers={"Authorization": "Bearer k1x"})
    assert r.status_code == 401


@pytest.mark.parametrize("headers", [{"Authorization": "Bearer k1"}, {"Authorization": "Bearer k2"},
                                     {"authorization": "bearer k2"}, {"X-Api-Key": "k1"}])
def test_auth_good_keys(keyed, headers):
    r = keyed.client().post(CHAT, json={"messages": USER, "max_tokens": 5}, headers=headers)
    assert r.status_code == 200


def test_auth_models_needs_key(keyed):
    assert keyed.client().get("/v1/models").status_code == 401
    assert keyed.client().get("/v1/models", headers={"Authorization": "Bearer k2"}).status_code == 200


def test_auth_health_and_metrics_open(keyed):
    c = keyed.client()
    assert c.get("/health").status_code == 200
    assert c.get("/metrics").status_code == 200


def test_auth_metrics_protected_when_asked(make_app):
    b = make_app(settings=Settings(api_keys=("k1",), metrics_require_auth=True))
    c = b.client()
    assert c.get("/metrics").status_code == 401
    assert c.get("/metrics", headers={"Authorization": "Bearer k1"}).status_code == 200
    assert c.get("/health").status_code == 200


# --------------------------------------------------------------------------- limits


def test_body_too_large_413(make_app):
    b = make_app(settings=Settings(max_request_bytes=200))
    r = _chat(b.client(), messages=[{"role": "user", "content": "x" * 500}])
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"
    assert b.engine.requests == []


def test_body_too_large_without_content_length_413(make_app):
    b = make_app(settings=Settings(max_request_bytes=200))
    payload = json.dumps({"messages": [{"role": "user", "content": "x" * 500}]}).encode()

    def chunks():
        yield payload[:100]
        yield payload[100:]

    r = b.client().post(CHAT, content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"
    assert b.engine.requests == []


def test_too_many_tools_400(make_app):
    b = make_app(settings=Settings(max_tools=2))
    tools = [{"type": "function", "function": {"name": f"t{i}"}} for i in range(3)]
    r = _chat(b.client(), tools=tools)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "tools" and err["code"] == "too_many_tools"


def test_concurrency_cap_429(make_app):
    asyncio.run(_test_concurrency_cap_429(make_app))


async def _test_concurrency_cap_429(make_app):
    b = make_app(settings=Settings(max_concurrent_requests=1), delay=0.05)
    async with b.async_client() as c:
        first = asyncio.ensure_future(c.post(CHAT, json={"messages": USER, "max_tokens": 50}))
        for _ in range(200):
            if b.state.in_flight:
                break
            await asyncio.sleep(0.005)
        assert b.state.in_flight == 1
        second = await c.post(CHAT, json={"messages": USER, "max_tokens": 50})
        assert second.status_code == 429
        assert second.headers["retry-after"] == "1"
        err = second.json()["error"]
        assert err["type"] == "rate_limit_error" and err["code"] == "too_many_requests"
        assert (await first).status_code == 200
        assert b.state.in_flight == 0
        # /health and /v1/models do not take a slot
        again = await c.post(CHAT, json={"messages": USER, "max_tokens": 5})
        assert again.status_code == 200


# --------------------------------------------------------------------------- draining, dead engine


def test_draining_503(make_app):
    b = make_app()
    b.state.draining = True
    c = b.client()
    r = _chat(c)
    assert r.status_code == 503
    assert r.json()["error"]["type"] == "server_error"
    assert r.headers.get("retry-after") == "1"
    r = c.post("/v1/completions", json={"prompt": "x"})
    assert r.status_code == 503
    assert c.get("/health").status_code == 503
    assert c.get("/health").json()["status"] == "draining"
    assert c.get("/v1/models").status_code == 200  # reads still work while draining
    assert b.engine.requests == []


def test_draining_lets_in_flight_finish(make_app):
    b = make_app(delay=0.02)

    async def run() -> None:
        async with b.async_client() as c:
            first = asyncio.ensure_future(c.post(CHAT, json={"messages": USER, "max_tokens": 50}))
            for _ in range(200):
                if b.state.in_flight:
                    break
                await asyncio.sleep(0.005)
            b.state.draining = True
            refused = await c.post(CHAT, json={"messages": USER, "max_tokens": 50})
            assert refused.status_code == 503
            done = await first
            assert done.status_code == 200 and done.json()["choices"][0]["message"]["content"] == HELLO
            assert b.state.in_flight == 0

    asyncio.run(run())


def test_gauges_return_to_zero(make_app):
    b = make_app()
    c = b.client()
    running, waiting = metrics.RUNNING._value.get(), metrics.WAITING._value.get()
    _chat(c, max_tokens=3)
    _stream_raw(c, max_tokens=3)
    c.post("/v1/completions", json={"prompt": "x", "max_tokens": 3})
    _chat(c, messages=[])  # 400 before the engine
    b.engine.dead = True
    _chat(c)  # 503 from the engine
    assert (metrics.RUNNING._value.get(), metrics.WAITING._value.get()) == (running, waiting)
    assert b.state.in_flight == 0


def test_not_ready_health_503(make_app):
    b = make_app()
    b.state.ready = False
    assert b.client().get("/health").status_code == 503
    b.state.ready = True
    assert b.client().get("/health").json() == {"status": "ok"}


def test_engine_dead_non_stream(make_app):
    b = make_app()
    b.engine.dead = True
    c = b.client()
    r = _chat(c)
    assert r.status_code == 503
    err = r.json()["error"]
    assert err["code"] == "engine_dead" and err["type"] == "server_error"
    assert set(err) == {"message", "type", "param", "code"}
    assert b.state.engine_dead is True
    assert c.get("/health").status_code == 503
    assert _chat(c).status_code == 503  # refused up front from now on


class _DiesAfterFirst(list):
    """A script whose iteration kills the engine after the first piece."""

    def __init__(self, engine_ref: list[Any], pieces: list[str]) -> None:
        super().__init__(pieces)
        self.engine_ref = engine_ref

    def __iter__(self):
        for i, piece in enumerate(list.__iter__(self)):
            if i == 1:
                self.engine_ref[0].dead = True
            yield piece


def test_engine_dead_mid_stream(make_app):
    ref: list[Any] = []
    b = make_app(script=lambda req: _DiesAfterFirst(ref, ["Hello", " world", "!"]))
    ref.append(b.engine)
    c = b.client()
    raw = _stream_raw(c, max_tokens=50)
    events = _events(raw)
    assert events[-1] == "[DONE]"
    assert "error" in events[-2]
    assert events[-2]["error"]["code"] == "engine_dead"
    assert set(events[-2]["error"]) == {"message", "type", "param", "code"}
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(ch["delta"].get("content") or "" for ev in events[:-2] for ch in ev["choices"]) == "Hello"
    assert b.state.engine_dead is True
    assert c.get("/health").status_code == 503


class _RaisesAfterFirst(list):
    def __iter__(self):
        yield "Hel"
        raise RuntimeError("unexpected engine failure")


def test_unexpected_error_mid_stream_ends_with_error_and_done(make_app):
    b = make_app(script=lambda req: _RaisesAfterFirst(["a", "b", "c"]))  # len > 1: not the last piece
    before = metrics.CLIENT_DISCONNECTS._value.get()
    raw = _stream_raw(b.client(), max_tokens=50)
    events = _events(raw)
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["type"] == "server_error"
    assert metrics.CLIENT_DISCONNECTS._value.get() == before


def test_health_marks_engine_dead(make_app):
    b = make_app()
    b.engine.dead = True
    r = b.client().get("/health")
    assert r.status_code == 503 and b.state.engine_dead is True


# --------------------------------------------------------------------------- disconnect


def test_disconnect_aborts_engine_request(make_app):
    asyncio.run(_test_disconnect_aborts_engine_request(make_app))


async def _test_disconnect_aborts_engine_request(make_app):
    from server.chat.service import chat_stream, prepare_chat
    from server.protocol import ChatCompletionRequest

    b = make_app(script=_script(["a", "b", "c", "d"]))
    req = ChatCompletionRequest.model_validate({"messages": USER, "stream": True, "max_tokens": 50})
    prepared = prepare_chat(b.state, req)
    before = metrics.CLIENT_DISCONNECTS._value.get()
    gen = chat_stream(b.state, prepared)
    first = await gen.__anext__()
    second = await gen.__anext__()
    assert b"assistant" in first and b'"a"' in second
    await gen.aclose()
    assert b.engine.aborted == [prepared.id]
    assert prepared.id == b.engine.requests[-1].request_id
    assert metrics.CLIENT_DISCONNECTS._value.get() == before + 1


def test_finished_stream_does_not_abort(make_app):
    asyncio.run(_test_finished_stream_does_not_abort(make_app))


async def _test_finished_stream_does_not_abort(make_app):
    from server.chat.service import chat_stream, prepare_chat
    from server.protocol import ChatCompletionRequest

    b = make_app()
    req = ChatCompletionRequest.model_validate({"messages": USER, "stream": True, "max_tokens": 50})
    out = [x async for x in chat_stream(b.state, prepare_chat(b.state, req))]
    assert out[-1] == b"data: [DONE]\n\n"
    assert b.engine.aborted == []


def test_http_disconnect_mid_stream_aborts(make_app):
    """A real ASGI http.disconnect while the engine is generating reaches engine.abort."""
    b = make_app(script=_script(["x"] * 50), delay=0.01)
    asyncio.run(_disconnect_mid_stream(b))


class _AwaitingAbortEngine(FakeEngine):
    """Like the vLLM adapter, whose abort awaits ``AsyncLLM.abort`` (a suspension point)."""

    async def abort(self, request_id: str) -> None:
        await asyncio.sleep(0)
        self.aborted.append(request_id)


def test_http_disconnect_aborts_engine_whose_abort_awaits(make_app):
    b = make_app()
    b.engine = b.state.engine = _AwaitingAbortEngine(script=_script(["x"] * 50), delay=0.01)
    asyncio.run(_disconnect_mid_stream(b))


async def _disconnect_mid_stream(b: Any) -> None:
    body = json.dumps({"messages": USER, "stream": True, "max_tokens": 100}).encode()
    sent: list[dict[str, Any]] = []
    got_body = asyncio.Event()
    gone = asyncio.Event()
    first = True

    async def receive() -> dict[str, Any]:
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and b'"x"' in message.get("body", b""):
            got_body.set()

    # spec_version 2.3 is what uvicorn (h11 and httptools) declares
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": CHAT, "raw_path": CHAT.encode(), "query_string": b"",
             "root_path": "", "headers": [(b"content-type", b"application/json"),
                                          (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 1), "server": ("test", 80)}
    task = asyncio.ensure_future(b.app(scope, receive, send))
    await asyncio.wait_for(got_body.wait(), 5)
    gone.set()
    await asyncio.wait_for(task, 5)
    rid = b.engine.requests[-1].request_id
    assert b.engine.aborted == [rid]
    assert b.state.in_flight == 0
    assert sum(1 for m in sent if m["type"] == "http.response.body") < 50


def test_completion_stream_disconnect_aborts(make_app):
    from server.chat.completions import completion_stream, prepare_completion
    from server.protocol import CompletionRequest

    b = make_app(script=_script(["a", "b", "c", "d"]))

    async def run() -> None:
        req = CompletionRequest.model_validate({"prompt": "x", "stream": True, "max_tokens": 50})
        jobs = prepare_completion(b.state, req)
        gen = completion_stream(b.state, req, jobs)
        assert b'"a"' in await gen.__anext__()
        await gen.aclose()
        assert b.engine.aborted == [jobs[0][1].request_id]

    asyncio.run(run())


def test_cors_preflight_open_with_auth(make_app):
    b = make_app(settings=Settings(api_keys=("k",), cors_origins=("https://app.example",)))
    r = b.client().options(CHAT, headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                                          "Access-Control-Request-Headers": "authorization"})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "https://app.example"


# --------------------------------------------------------------------------- request id


def test_request_id_echoed(make_app):
    c = make_app().client()
    r = c.post(CHAT, json={"messages": USER, "max_tokens": 5}, headers={"X-Request-Id": "my-req-42"})
    assert r.headers["x-request-id"] == "my-req-42"
    r = c.get("/v1/models", headers={"X-Request-Id": "abc"})
    assert r.headers["x-request-id"] == "abc"


def test_request_id_generated(make_app):
    c = make_app().client()
    a = c.post(CHAT, json={"messages": USER, "max_tokens": 5}).headers["x-request-id"]
    bb = c.get("/health").headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", a) and re.fullmatch(r"[0-9a-f]{32}", bb) and a != bb


def test_request_id_on_errors(make_app):
    b = make_app(settings=Settings(api_keys=("k",)))
    r = b.client().post(CHAT, json={"messages": USER}, headers={"X-Request-Id": "rid-401"})
    assert r.status_code == 401 and r.headers["x-request-id"] == "rid-401"
    r = b.client().post(CHAT, content=b"{", headers={"X-Request-Id": "rid-400", "Authorization": "Bearer k"})
    assert r.status_code == 400 and r.headers["x-request-id"] == "rid-400"


def test_request_id_single_header_on_middleware_errors(make_app):
    b = make_app(settings=Settings(api_keys=("k",)))
    r = b.client().post(CHAT, json={"messages": USER}, headers={"X-Request-Id": "once"})
    assert r.headers.get_list("x-request-id") == ["once"]


# --------------------------------------------------------------------------- /v1/completions, /v1/models


def test_completions_text(make_app):
    b = make_app()
    r = b.client().post("/v1/completions", json={"model": "fake-model", "prompt": "Say", "max_tokens": 50})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "text_completion" and body["model"] == "fake-model"
    assert body["id"].startswith("cmpl-")
    assert body["choices"] == [{"index": 0, "text": HELLO, "logprobs": None, "finish_reason": "stop"}]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": len(HELLO), "total_tokens": 3 + len(HELLO)}
    assert CharTokenizer().decode(b.engine.requests[-1].prompt_token_ids) == "Say"


def test_completions_default_max_tokens_16_and_length(make_app):
    b = make_app(script=_script(["a" * 30]))
    body = b.client().post("/v1/completions", json={"prompt": "Say"}).json()
    assert b.engine.requests[-1].sampling.max_tokens == 16
    assert body["choices"][0]["text"] == "a" * 16 and body["choices"][0]["finish_reason"] == "length"


def test_completions_echo_and_logprobs(make_app):
    b = make_app()
    body = b.client().post("/v1/completions", json={"prompt": "Say", "echo": True, "logprobs": 2,
                                                    "max_tokens": 50}).json()
    [choice] = body["choices"]
    assert choice["text"] == "Say" + HELLO
    lp = choice["logprobs"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert lp["tokens"] == list(HELLO)
    assert lp["token_logprobs"] == [-0.5] * len(HELLO)
    assert lp["top_logprobs"] == [{}] * len(HELLO)
    assert lp["text_offset"] == list(range(3, 3 + len(HELLO)))  # offsets count the echoed prompt
    assert b.engine.requests[-1].sampling.logprobs == 2


def test_completions_prompt_list_and_token_ids(make_app):
    b = make_app()
    c = b.client()
    body = c.post("/v1/completions", json={"prompt": ["a", "bb"], "max_tokens": 50}).json()
    assert [ch["index"] for ch in body["choices"]] == [0, 1]
    assert body["usage"]["prompt_tokens"] == 3
    body = c.post("/v1/completions", json={"prompt": [72, 105], "max_tokens": 50, "echo": True}).json()
    assert body["choices"][0]["text"] == "Hi" + HELLO
    assert b.engine.requests[-1].prompt_token_ids == [72, 105]


def test_completions_stream(make_app):
    b = make_app()
    with b.client().stream("POST", "/v1/completions", json={
            "prompt": "Say", "echo": True, "stream": True, "max_tokens": 50,
            "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = "".join(r.iter_text())
    events = _events(raw)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(e["object"] == "text_completion" for e in chunks)
    assert len({e["id"] for e in chunks}) == 1
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == len(HELLO)
    texts = [ch["text"] for e in chunks[:-1] for ch in e["choices"]]
    assert "".join(texts) == "Say" + HELLO
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert all(ch["finish_reason"] is None for e in chunks[:-2] for ch in e["choices"])


def test_models_list_and_get(make_app):
    c = make_app(max_model_len=2048).client()
    body = c.get("/v1/models").json()
    assert body["object"] == "list"
    [card] = body["data"]
    assert card["id"] == "fake-model" and card["object"] == "model" and card["max_model_len"] == 2048
    assert isinstance(card["created"], int) and card["owned_by"]
    assert c.get("/v1/models/fake-model").json() == card
    r = c.get("/v1/models/other")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


# --------------------------------------------------------------------------- metrics


def test_metrics_exposes_every_name(make_app):
    b = make_app(script=_script(WEATHER_SCRIPT))
    c = b.client()
    assert _chat(c, tools=[WEATHER_TOOL], max_tokens=200).status_code == 200
    r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    declared = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")}
    samples = {re.split(r"[{ ]", ln, maxsplit=1)[0] for ln in text.splitlines() if ln and not ln.startswith("#")}
    for name in metrics.METRIC_NAMES:
        base = name.removesuffix("_total")
        assert name in declared or base in declared, f"{name} not declared"
        assert any(s == name or s.startswith(name + "_") or s.startswith(base + "_") for s in samples), \
            f"{name} has no samples"
    assert re.search(r'gramserve_requests_total\{endpoint="/v1/chat/completions",status="200"\} [1-9]', text)
    assert re.search(r'gramserve_tool_calls_total\{outcome="valid",parser="hermes"\} [1-9]', text)


def test_metrics_unknown_paths_bounded_label(make_app):
    c = make_app().client()
    c.get("/no/such/path/12345")
    text = c.get("/metrics").text
    assert "/no/such/path/12345" not in text
    assert 'endpoint="other",status="404"' in text
