"""Table-driven hostile and careless input against the real server, every endpoint.

Each case: the status, the OpenAI envelope, the ``param`` where one is named; after each, the
server is healthy and answers a normal request. Counts are printed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.server_process import API_KEY

from ._probe import assert_envelope, assert_healthy

pytestmark = pytest.mark.reliability

HI = [{"role": "user", "content": "Hi"}]
SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
TOOL = {"type": "function", "function": {"name": "f", "parameters": SCHEMA}}


@dataclass
class Case:
    name: str
    path: str
    body: Any = None  # JSON body, or bytes sent as is
    status: int = 400
    param: str | None = None
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)


def chat(name: str, param: str | None = None, status: int = 400, **kw: Any) -> Case:
    return Case(name, "/v1/chat/completions", {"messages": HI, "max_tokens": 2, **kw}, status, param)


def comp(name: str, param: str | None = None, status: int = 400, **kw: Any) -> Case:
    return Case(name, "/v1/completions", {"prompt": "Hi", "max_tokens": 2, **kw}, status, param)


def resp(name: str, param: str | None = None, status: int = 400, **kw: Any) -> Case:
    return Case(name, "/v1/responses", {"input": "Hi", "max_output_tokens": 2, **kw}, status, param)


def rf(schema: Any, strict: bool | None = None) -> dict[str, Any]:
    js: dict[str, Any] = {"name": "x", "schema": schema}
    if strict is not None:
        js["strict"] = strict
    return {"type": "json_schema", "json_schema": js}


DEEP = b'{"messages": [{"role": "user", "content": "x"}], "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"

CASES: list[Case] = [
    # --- framing and body
    Case("empty body", "/v1/chat/completions", b""),
    Case("not json", "/v1/chat/completions", b"{nope"),
    Case("json array", "/v1/chat/completions", b"[]"),
    Case("json string", "/v1/chat/completions", b'"x"'),
    Case("truncated json", "/v1/chat/completions", b'{"messages": [{"role": "user"'),
    Case("invalid utf-8", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}'),
    Case("deep nesting chat", "/v1/chat/completions", DEEP),
    Case("deep nesting completions", "/v1/completions", b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
    Case("deep nesting schema check", "/v1/schemas/check", b'{"a": ' * 5000 + b"1" + b"}" * 5000),
    Case("lone surrogate content", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\ud800"}]}'),
    Case("lone surrogate stop", "/v1/chat/completions",
         b'{"messages": [{"role": "user", "content": "x"}], "stop": "\\udc00"}'),
    Case("lone surrogate prompt", "/v1/completions", b'{"prompt": "a\\udbffb"}'),
    Case("lone surrogate tool description", "/v1/chat/completions",
         b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": '
         b'{"name": "f", "description": "\\ud800"}}]}'),
    Case("too large body", "/v1/chat/completions", b"{" + b" " * (5 * 1024 * 1024) + b"}", status=413),
    # --- messages
    chat("no messages", "messages", messages=[]),
    chat("messages not a list", "messages", messages="hi"),
    chat("unknown role", "messages[0].role", messages=[{"role": "wizard", "content": "x"}]),
    chat("no content", "messages[0]", messages=[{"role": "user"}]),
    chat("content number", "messages[0].content", messages=[{"role": "user", "content": 5}]),
    chat("image part", "messages[0]", messages=[{"role": "user", "content": [{"type": "image_url"}]}]),
    chat("tool without id", "messages[1]", messages=[HI[0], {"role": "tool", "content": "x"}]),
    chat("orphan tool result", "messages", messages=[HI[0], {"role": "tool", "tool_call_id": "c1", "content": "x"}]),
    chat("tool result for unknown id", "messages", messages=[HI[0], {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c9", "content": "x"}]),
    chat("model unknown", "model", status=404, model="gpt-17"),
    chat("model number", "model", model=5),
    # --- sampling values
    chat("temperature high", "temperature", temperature=3),
    chat("temperature negative", "temperature", temperature=-1),
    chat("temperature string", "temperature", temperature="hot"),
    chat("top_p zero", "top_p", top_p=0),
    chat("top_p high", "top_p", top_p=1.5),
    chat("n zero", "n", n=0),
    chat("n huge", "n", n=1000),
    chat("seed huge", "seed", seed=2**63),
    chat("logit_bias key not an id", "logit_bias", logit_bias={"abc": 1}),
    chat("logit_bias out of range", "logit_bias", logit_bias={"5": 101}),
    chat("logit_bias id outside vocabulary", "logit_bias", logit_bias={"999999999": 1}),
    chat("logit_bias negative id", "logit_bias", logit_bias={"-3": 1}),
    chat("max_tokens zero", "max_tokens", max_tokens=0),
    chat("max_tokens negative", "max_tokens", max_tokens=-5),
    chat("max_tokens float", "max_tokens", max_tokens=1.5),
    chat("max_tokens beyond context", "max_tokens", max_tokens=10**9),
    chat("max_completion_tokens beyond context", "max_completion_tokens", max_completion_tokens=10**9),
    chat("stop empty string", "stop", stop=""),
    chat("stop empty in list", "stop", stop=["a", ""]),
    chat("stop five", "stop", stop=["a", "b", "c", "d", "e"]),
    chat("stop number", "stop", stop=5),
    chat("stop huge", "stop", stop="x" * 5000),
    chat("seed 2^64", "seed", seed=2**64),
    chat("seed below int64", "seed", seed=-(2**63) - 1),
    chat("seed string", "seed", seed="abc"),
    chat("presence penalty", "presence_penalty", presence_penalty=5),
    chat("frequency penalty", "frequency_penalty", frequency_penalty=-5),
    chat("top_logprobs without logprobs", "top_logprobs", top_logprobs=3),
    chat("top_logprobs too many", "top_logprobs", logprobs=True, top_logprobs=50),
    chat("stream not bool", "stream", stream="yes"),
    chat("stream_options bad", "stream_options.include_usage", stream=True, stream_options={"include_usage": "x"}),
    chat("max_reasoning_tokens negative", "max_reasoning_tokens", max_reasoning_tokens=-1),
    chat("chat_template_kwargs reserved", "chat_template_kwargs", chat_template_kwargs={"messages": []}),
    chat("chat_template_kwargs not dict", "chat_template_kwargs", chat_template_kwargs=[1]),
    # --- tools
    chat("tools not list", "tools", tools={"a": 1}),
    chat("tool bad type", "tools[0].type", tools=[{"type": "plugin", "function": {"name": "f"}}]),
    chat("tool bad name", "tools[0].function.name", tools=[{"type": "function", "function": {"name": "a b"}}]),
    chat("tool name too long", "tools[0].function.name", tools=[{"type": "function", "function": {"name": "a" * 65}}]),
    chat("tool duplicate names", "tools", tools=[TOOL, TOOL]),
    chat("tool parameters not object", "tools[0].function.parameters",
         tools=[{"type": "function", "function": {"name": "f", "parameters": [1]}}]),
    chat("tool parameters invalid schema", None,
         tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": 7}}}]),
    chat("tool parameters remote ref", "tools.f.parameters",
         tools=[{"type": "function", "function": {"name": "f", "parameters": {"$ref": "http://127.0.0.1:9/x"}}}]),
    chat("tool parameters ref loop", "tools.f.parameters",
         tools=[{"type": "function", "function": {"name": "f", "parameters": {"$ref": "#"}}}]),
    chat("tool_choice without tools", "tool_choice", tool_choice="required"),
    chat("tool_choice unknown name", "tool_choice", tools=[TOOL], tool_choice={"type": "function", "function": {"name": "g"}}),
    chat("tool_choice bad string", "tool_choice", tools=[TOOL], tool_choice="sometimes"),
    chat("too many tools", "tools", tools=[{"type": "function", "function": {"name": f"f{i}"}} for i in range(200)]),
    # --- response_format / structured outputs
    chat("response_format bad type", "response_format.type", response_format={"type": "yaml"}),
    chat("json_schema without json_schema", "response_format", response_format={"type": "json_schema"}),
    chat("schema not object", "response_format.json_schema.schema", response_format=rf([1])),
    chat("schema invalid type", "response_format.json_schema.schema", response_format=rf({"type": "nonsense"})),
    chat("schema http ref", "response_format.json_schema.schema", response_format=rf({"$ref": "http://127.0.0.1:9/s"})),
    chat("schema file ref", "response_format.json_schema.schema", response_format=rf({"$ref": "file:///etc/passwd"})),
    chat("schema relative ref", "response_format.json_schema.schema", response_format=rf({"$ref": "other.json"})),
    chat("schema self ref strict", "response_format.json_schema.schema", response_format=rf({"$ref": "#"}, True)),
    chat("schema self ref", "response_format.json_schema.schema", response_format=rf({"$ref": "#"})),
    chat("schema ref cycle", "response_format.json_schema.schema",
         response_format=rf({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, True)),
    chat("schema unknown anchor", "response_format.json_schema.schema", response_format=rf({"$ref": "#nowhere"})),
    chat("schema strict loose keyword", "response_format.json_schema.schema",
         response_format=rf({"type": "string", "not": {"const": "a"}}, True)),
    chat("schema too deep", "response_format.json_schema.schema",
         response_format=rf(json.loads('{"type": "array", "items": ' * 100 + '{"type": "string"}' + "}" * 100))),
    chat("schema too large", "response_format.json_schema.schema",
         response_format=rf({"type": "object", "properties": {f"p{i:05d}": {"type": "string", "description": "d" * 40}
                                                              for i in range(5000)}})),
    chat("so regex invalid", None, structured_outputs={"regex": "[0-9"}),
    chat("so regex huge", "structured_outputs.regex", structured_outputs={"regex": "a" * 300_000}),
    chat("so grammar invalid", None, structured_outputs={"grammar": "root ::= ("}),
    chat("so grammar huge", "structured_outputs.grammar", structured_outputs={"grammar": 'root ::= "' + "a" * 300_000 + '"'}),
    chat("so choice empty", None, structured_outputs={"choice": []}),
    chat("so choice 50k", "structured_outputs.choice", structured_outputs={"choice": [f"c{i}" for i in range(50_000)]}),
    chat("so choice bytes", "structured_outputs.choice", structured_outputs={"choice": ["x" * 200_000, "y" * 100_000]}),
    chat("so json not json", "structured_outputs.json", structured_outputs={"json": "{not json"}),
    chat("so json array", "structured_outputs.json", structured_outputs={"json": "[1]"}),
    chat("so json remote ref", "structured_outputs.json", structured_outputs={"json": {"$ref": "https://example.com/s"}}),
    # --- completions
    comp("prompt missing", "prompt", prompt=None),
    comp("prompt empty", "prompt", prompt=""),
    comp("prompt empty list", "prompt", prompt=[]),
    comp("prompt list with empty string", "prompt", prompt=["a", ""]),
    comp("prompt negative id", "prompt", prompt=[1, -1]),
    comp("prompt out of vocabulary", "prompt", prompt=[1, 10**9]),
    comp("prompt huge id", "prompt", prompt=[2**70]),
    comp("prompt dict", "prompt", prompt={"a": 1}),
    comp("suffix", "suffix", suffix="x"),
    comp("logprobs too many", "logprobs", logprobs=50),
    comp("completion max_tokens beyond context", "max_tokens", max_tokens=10**9),
    comp("completion seed 2^64", "seed", seed=2**64),
    comp("stop empty", "stop", stop=""),
    comp("completion so choice 50k", "structured_outputs.choice", structured_outputs={"choice": [f"c{i}" for i in range(50_000)]}),
    comp("schema remote ref", "structured_outputs.json", structured_outputs={"json": {"$ref": "http://127.0.0.1:9/s"}}),
    # --- schema check
    Case("check empty", "/v1/schemas/check", b""),
    Case("check not json", "/v1/schemas/check", b"{x"),
    Case("check number", "/v1/schemas/check", 5),
    Case("check remote ref", "/v1/schemas/check", {"$ref": "http://127.0.0.1:9/s"}, param="schema"),
    Case("check deep", "/v1/schemas/check",
         json.loads('{"type": "array", "items": ' * 100 + '{"type": "string"}' + "}" * 100), param="schema"),
    Case("check bad tools", "/v1/schemas/check", {"tools": [{"type": "function"}]}),
    Case("check too large", "/v1/schemas/check",
         {"type": "object", "properties": {f"p{i:05d}": {"type": "string", "description": "d" * 40} for i in range(5000)}},
         param="schema"),
    # --- Responses
    Case("responses empty", "/v1/responses", b""),
    Case("responses not json", "/v1/responses", b"{nope"),
    resp("responses input number", "input", input=5),
    resp("responses item not object", "input[0]", input=[7]),
    resp("responses unknown item", "input[0].type", input=[{"type": "computer_call", "id": "x"}]),
    resp("responses orphan output", "input[0].call_id",
         input=[{"type": "function_call_output", "call_id": "call_x", "output": "1"}]),
    resp("responses control tokens as role", "input[0].role", input=[{"role": "<|im_start|>", "content": "x"}]),
    resp("responses unknown previous id", "previous_response_id", status=404, previous_response_id="resp_nope"),
    resp("responses remote ref", "text.format.schema", text={"format": {
        "type": "json_schema", "name": "x", "schema": {"$ref": "http://127.0.0.1:9/s"}}}),
    resp("responses hosted tool", "tools[0].type", tools=[{"type": "file_search", "vector_store_ids": ["v"]}]),
    resp("responses lark tool", "tools[0]", tools=[{"type": "custom", "name": "c", "format": {
        "type": "grammar", "syntax": "lark", "definition": "start: /.*/"}}]),
    resp("responses huge budget", "max_output_tokens", max_output_tokens=10**9),
    resp("responses stream not bool", "stream", stream="yes"),
    Case("responses get unknown", "/v1/responses/resp_nope", None, status=404, method="GET"),
    Case("responses delete unknown", "/v1/responses/resp_nope", None, status=404, method="DELETE"),
    # --- methods, paths, headers, auth
    Case("GET on chat", "/v1/chat/completions", None, status=405, method="GET"),
    Case("PUT on models", "/v1/models", None, status=405, method="PUT"),
    Case("unknown path", "/v1/nothing", None, status=404, method="GET"),
    Case("unknown model path", "/v1/models/gpt-17", None, status=404, method="GET"),
    Case("huge header", "/v1/models", None, status=431, method="GET", headers={"x-big": "a" * 40_000}),
    Case("no key", "/v1/chat/completions", {"messages": HI}, status=401, headers={"Authorization": ""}),
    Case("wrong key", "/v1/chat/completions", {"messages": HI}, status=401, headers={"Authorization": "Bearer nope"}),
]


def test_enough_cases() -> None:
    assert len(CASES) >= 100, len(CASES)
    assert len({c.name for c in CASES}) == len(CASES)
    assert {c.path for c in CASES} >= {"/v1/chat/completions", "/v1/completions", "/v1/schemas/check", "/v1/models",
                                       "/v1/responses"}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input(case: Case, server: Any, http: httpx.Client, model: str) -> None:
    headers = {"Authorization": f"Bearer {API_KEY}", **case.headers}
    kwargs: dict[str, Any] = {"headers": headers}
    if isinstance(case.body, bytes):
        kwargs["content"] = case.body
        headers["content-type"] = "application/json"
    elif case.body is not None:
        kwargs["json"] = case.body
    with httpx.Client(base_url=server.base, timeout=120) as c:
        r = c.request(case.method, case.path, **kwargs)
    assert_envelope(r, case.status, param=case.param)
    assert_healthy(http, model)
