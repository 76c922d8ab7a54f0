"""``max_reasoning_tokens`` with the scripted FakeEngine: two engine phases behind one request.

The fake engine counts one token per character and ignores ``stop``; the script below
plays vLLM's part: in phase 1 (``stop`` holds ``</think>``) it returns the thinking text
cut before the end marker, in phase 2 the answer.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

from server.config import Settings
from server.engine.base import GenerateRequest, TokenChunk
from server.chat.reasoning_budget import budgeted_chunks, think_block_constraint
from tests.sse_validator import validate_sse

CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "Hi"}]
END = "</think>"
ANSWER = '{"a": 1}'
SCHEMA_RF = {"type": "json_schema", "json_schema": {
    "name": "out", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                          "required": ["city"]}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _two_phase(thinking: list[str], answer: list[str]):
    """Phase 1 returns ``thinking`` (stopped before ``</think>`` like vLLM), phase 2 ``answer``."""

    def script(req: GenerateRequest) -> list[str]:
        if END not in req.sampling.stop:
            return list(answer)
        text = "".join(thinking)
        return [text[: text.index(END)]] if END in text else list(thinking)

    return script


def _app(make_app: Any, script: Any, **engine_kwargs: Any) -> Any:
    return make_app(script=script, reasoning_parser="qwen3", settings=Settings(reasoning_required=True),
                    **engine_kwargs)


def _chat(b: Any, **body: Any) -> Any:
    body.setdefault("messages", USER)
    return b.client().post(CHAT, json=body)


def _stream(b: Any, **body: Any) -> str:
    body.setdefault("messages", USER)
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    with b.client().stream("POST", CHAT, json=body) as r:
        assert r.status_code == 200, r.read()
        return "".join(r.iter_text())


# --------------------------------------------------------------------------- phase switching


def test_cap_closes_block_and_constrains_answer(make_app):
    b = _app(make_app, _two_phase(["thinking ", "about it ", "at length"], [ANSWER]))
    r = _chat(b, max_reasoning_tokens=5, max_tokens=100, response_format=SCHEMA_RF)
    assert r.status_code == 200, r.text
    body = r.json()
    msg = body["choices"][0]["message"]
    assert msg["reasoning_content"] == "think" and msg["content"] == ANSWER
    assert body["choices"][0]["finish_reason"] == "stop"
    think, answer = b.engine.requests
    assert think.request_id == answer.request_id == body["id"]
    assert think.sampling.max_tokens == 5 and think.sampling.stop == (END,)
    assert think.constraint == think_block_constraint("", END)
    # the answer continues after the closed block, constrained without a reasoning prefix
    assert answer.prompt_token_ids == think.prompt_token_ids + [ord(ch) for ch in "think" + END]
    assert answer.constraint.kind == "json"
    assert answer.sampling.max_tokens == 100 - 5 - len(END) and answer.sampling.n == 1
    prompt = len(think.prompt_token_ids)
    assert body["usage"] == {"prompt_tokens": prompt, "completion_tokens": 5 + len(END) + len(ANSWER),
                             "total_tokens": prompt + 5 + len(END) + len(ANSWER),
                             "completion_tokens_details": {"reasoning_tokens": 5}}
    assert r.headers["x-gramserve-schema-validated"] == "valid"


def test_model_closing_the_block_itself_costs_no_marker_tokens(make_app):
    b = _app(make_app, _two_phase(["ab", "c" + END + "ignored"], [ANSWER]))
    body = _chat(b, max_reasoning_tokens=50, max_tokens=100, response_format=SCHEMA_RF).json()
    msg = body["choices"][0]["message"]
    assert msg["reasoning_content"] == "abc" and msg["content"] == ANSWER
    assert body["usage"]["completion_tokens"] == 3 + len(ANSWER)
    assert b.engine.requests[1].prompt_token_ids[-len("abc" + END):] == [ord(ch) for ch in "abc" + END]


def test_stream_equals_non_stream_and_marker_never_shown(make_app):
    script = _two_phase(["thin", "king ", "more"], [ANSWER[:3], ANSWER[3:]])
    b = _app(make_app, script)
    plain = _chat(b, max_reasoning_tokens=6, max_tokens=100, response_format=SCHEMA_RF).json()
    raw = _stream(b, max_reasoning_tokens=6, max_tokens=100, response_format=SCHEMA_RF)
    r = validate_sse(raw, expect_usage=True)
    msg = plain["choices"][0]["message"]
    assert r.reasoning == {0: msg["reasoning_content"]} == {0: "thinki"}
    assert r.content == {0: msg["content"]} == {0: ANSWER}
    assert r.finish_reason == {0: "stop"}
    assert r.usage == plain["usage"]
    assert "think>" not in raw  # no marker in any field
    deltas = [json.loads(e[6:])["choices"] for e in raw.split("\n\n") if e.startswith("data: {")]
    kinds = [k for ch in deltas for c in ch for k in c["delta"] if k in ("reasoning_content", "content")
             and c["delta"][k]]
    assert kinds == sorted(kinds, key=lambda k: k != "reasoning_content")  # reasoning first, then content


def test_tool_call_after_capped_thinking(make_app):
    b = _app(make_app, _two_phase(["let me see what to call"], [CALL[:20], CALL[20:]]))
    r = _chat(b, max_reasoning_tokens=7, max_tokens=200, tools=[WEATHER_TOOL], tool_choice="required")
    body = r.json()
    choice = body["choices"][0]
    assert choice["message"]["reasoning_content"] == "let me "
    [call] = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert choice["finish_reason"] == "tool_calls"
    answer = b.engine.requests[1].constraint
    assert answer.kind == "structural_tag" and "any_text" not in json.dumps(answer.value)


def test_cap_zero_skips_thinking(make_app):
    b = _app(make_app, _two_phase(["never"], [ANSWER]))
    body = _chat(b, max_reasoning_tokens=0, max_tokens=100, response_format=SCHEMA_RF).json()
    [answer] = b.engine.requests
    assert answer.prompt_token_ids[-len(END):] == [ord(ch) for ch in END]
    msg = body["choices"][0]["message"]
    assert msg["reasoning_content"] is None and msg["content"] == ANSWER
    assert body["usage"]["completion_tokens"] == len(END) + len(ANSWER)


def test_two_choices_each_get_their_answer(make_app):
    b = _app(make_app, _two_phase(["abcdefgh"], [ANSWER]))
    body = _chat(b, max_reasoning_tokens=4, max_tokens=100, n=2, response_format=SCHEMA_RF).json()
    assert [c["message"]["reasoning_content"] for c in body["choices"]] == ["abcd", "abcd"]
    assert [c["message"]["content"] for c in body["choices"]] == [ANSWER, ANSWER]
    assert len(b.engine.requests) == 3
    assert body["usage"]["completion_tokens"] == 2 * (4 + len(END) + len(ANSWER))


# --------------------------------------------------------------------------- budget edges


def test_budget_spent_on_thinking_is_length(make_app):
    b = _app(make_app, _two_phase(["abcdefghij"], [ANSWER]))
    body = _chat(b, max_reasoning_tokens=50, max_tokens=6, response_format=SCHEMA_RF).json()
    assert len(b.engine.requests) == 1
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"]["reasoning_content"] == "abcdef"
    assert body["usage"]["completion_tokens"] == 6


def test_no_room_for_the_marker_is_length(make_app):
    b = _app(make_app, _two_phase(["abcdefghij"], [ANSWER]))
    body = _chat(b, max_reasoning_tokens=4, max_tokens=4 + len(END), response_format=SCHEMA_RF).json()
    assert len(b.engine.requests) == 1
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 4


def test_answer_cut_by_budget_is_length(make_app):
    b = _app(make_app, _two_phase(["abcdefghij"], ["x" * 50]))
    body = _chat(b, max_reasoning_tokens=4, max_tokens=20).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] == "x" * (20 - 4 - len(END))
    assert body["usage"]["completion_tokens"] == 20


def test_thinking_off_ignores_the_cap(make_app):
    b = _app(make_app, _two_phase(["ab"], [ANSWER]))
    for off in ({"chat_template_kwargs": {"enable_thinking": False}}, {"reasoning_effort": "none"}):
        r = _chat(b, max_reasoning_tokens=3, max_tokens=100, response_format=SCHEMA_RF, **off)
        assert r.status_code == 200, r.text
        req = b.engine.requests[-1]
        assert req.sampling.stop == () and req.constraint.kind == "json"
        assert r.json()["choices"][0]["message"]["content"] == ANSWER


def test_server_default_cap(make_app):
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class _Settings(Settings):  # until config.py has the flag
        max_reasoning_tokens: int | None = 3

    b = make_app(script=_two_phase(["abcdef"], [ANSWER]), reasoning_parser="qwen3",
                 settings=_Settings(reasoning_required=True))
    body = _chat(b, max_tokens=100, response_format=SCHEMA_RF).json()
    assert body["choices"][0]["message"]["reasoning_content"] == "abc"
    body = _chat(b, max_tokens=100, max_reasoning_tokens=5, response_format=SCHEMA_RF).json()
    assert body["choices"][0]["message"]["reasoning_content"] == "abcde"  # the request wins


def test_cap_without_reasoning_parser_is_400(make_app):
    b = make_app()
    r = _chat(b, max_reasoning_tokens=5)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "max_reasoning_tokens" and "--reasoning-parser" in err["message"]
    assert b.engine.requests == []


# --------------------------------------------------------------------------- the chunk stream itself


def test_chunks_feed_the_end_marker_once(make_app):
    b = _app(make_app, _two_phase(["abc", "def", "ghi"], ["x", "y"]))
    from server.plan import build_plan
    from server.plan.run import run_engine
    from server.protocol import ChatCompletionRequest

    req = ChatCompletionRequest.model_validate({"messages": USER, "max_tokens": 100, "max_reasoning_tokens": 5})
    p = build_plan(b.state, req)

    async def collect() -> list[TokenChunk]:
        return [c async for c in budgeted_chunks(b.state, p.gen, p.reasoning_budget, run=run_engine)]

    chunks = asyncio.run(collect())
    assert [c.text for c in chunks] == ["abc", "de", END, "x", "y"]
    assert [c.finish_reason for c in chunks] == [None, None, None, None, "stop"]
    assert [c.num_tokens for c in chunks] == [3, 2, len(END), 1, 1]
    assert p.gen.constraint is None  # plain chat: the answer is free text
    assert b.engine.requests[0].constraint == think_block_constraint("", END)


# --------------------------------------------------------------------------- abort


def test_disconnect_during_answer_aborts_the_request(make_app):
    b = _app(make_app, _two_phase(["abcdefgh"], ["x"] * 50), delay=0.005)

    async def run() -> None:
        from server.plan import build_plan
        from server.chat.sse import each_event
        from server.plan.chat_frames import chat_stream
        from server.protocol import ChatCompletionRequest

        req = ChatCompletionRequest.model_validate({"messages": USER, "stream": True, "max_tokens": 100,
                                                    "max_reasoning_tokens": 4})
        p = build_plan(b.state, req)
        gen = each_event(chat_stream(b.state, p))
        seen = b""
        while b'"content":"x"' not in seen:
            seen += await gen.__anext__()
        assert len(b.engine.requests) == 2  # phase 2 is running
        await gen.aclose()
        assert b.engine.aborted == [p.id] == [b.engine.requests[1].request_id]

    asyncio.run(run())


def test_capped_thinking_leaves_the_closed_answer_its_floor(make_app):
    """max_reasoning_tokens and max_tokens combine by one rule when the answer closes within its
    budget: the think phase ends by max_tokens - end marker - the shortest answer."""
    strict = {"type": "json_schema", "json_schema": {**SCHEMA_RF["json_schema"], "strict": True}}
    b = _app(make_app, _two_phase(["x" * 60], [ANSWER]))
    r = _chat(b, max_reasoning_tokens=50, max_tokens=30, response_format=strict)
    assert r.status_code == 200, r.text
    think, answer = b.engine.requests
    assert answer.constraint.closes
    floor = b.state.grammar_cache.min_tokens(answer.constraint)
    assert floor is not None and floor > 0
    assert think.sampling.max_tokens == 30 - len(END) - floor  # below the cap of 50
    assert answer.sampling.max_tokens == floor
