"""The agent loop against a scripted fake OpenAI server (httpx MockTransport under the real
``openai`` SDK): cache, error observations and retries, the iteration limit, parallel calls."""
from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
from openai import OpenAI

from examples.agent import Agent, Tool, ToolError, TTLCache, canonical_key, web_tool

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


def completion(*calls: tuple[str, Any], content: str | None = None, finish: str | None = None) -> dict[str, Any]:
    tool_calls = [{"id": f"call_{i}_{name}", "type": "function",
                   "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                  for i, (name, args) in enumerate(calls)]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "fake",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish or ("tool_calls" if tool_calls else "stop")}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


class FakeServer:
    """Answers each chat completion with the next scripted body; keeps every request it got."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        item = self.script.pop(0)
        if isinstance(item, httpx.Response):
            return item
        return httpx.Response(200, json=item)

    def client(self) -> OpenAI:
        return OpenAI(base_url="http://fake/v1", api_key="k", max_retries=0,
                      http_client=httpx.Client(transport=httpx.MockTransport(self.handler)))

    def tool_messages(self, request: int) -> list[dict[str, Any]]:
        return [m for m in self.requests[request]["messages"] if m["role"] == "tool"]


def counting_tool(name: str = "lookup", *, fail: list[Exception] | None = None, cacheable: bool = True,
                  delay_s: float = 0.0) -> tuple[Tool, list[dict]]:
    calls: list[dict] = []
    failures = list(fail or [])

    def run(x: int) -> dict[str, Any]:
        calls.append({"x": x})
        if delay_s:
            time.sleep(delay_s)
        if failures:
            raise failures.pop(0)
        return {"value": x * 10}

    return Tool(name=name, description=f"{name} test tool", parameters=SCHEMA, run=run, cacheable=cacheable), calls


def agent(server: FakeServer, tools: list[Tool], **kw: Any) -> Agent:
    return Agent(client=server.client(), model="fake", tools=tools, **kw)


# -- cache -------------------------------------------------------------------------------------

def test_same_call_in_one_context_runs_once():
    tool, calls = counting_tool()
    server = FakeServer([completion(("lookup", {"x": 1})), completion(("lookup", '{ "x" : 1 }')),
                         completion(content="done")])
    result = agent(server, [tool]).run("q")
    assert result.answer == "done" and calls == [{"x": 1}]
    first, second = result.steps[0].observations[0], result.steps[1].observations[0]
    assert (first.cached, second.cached) == (False, True)
    assert json.loads(server.tool_messages(2)[1]["content"]) == {"value": 10}


def test_cache_key_is_canonical_and_expires():
    assert canonical_key("t", {"a": 1, "b": [1, 2]}) == canonical_key("t", {"b": [1, 2], "a": 1})
    assert canonical_key("t", {"a": 1}) != canonical_key("u", {"a": 1})
    now = [0.0]
    cache = TTLCache(ttl_s=10, clock=lambda: now[0])
    runs = []
    compute = lambda: runs.append(1) or len(runs)  # noqa: E731
    assert cache.get_or_run("k", compute) == (1, False)
    assert cache.get_or_run("k", compute) == (1, True)
    now[0] = 11.0
    assert cache.get_or_run("k", compute) == (2, False)


def test_errors_are_not_cached():
    cache = TTLCache()
    assert cache.get_or_run("k", lambda: {"error": "x"}, keep=lambda v: "error" not in v)[1] is False
    assert cache.get_or_run("k", lambda: {"ok": 1}, keep=lambda v: "error" not in v) == ({"ok": 1}, False)


def test_concurrent_identical_calls_run_once():
    cache = TTLCache()
    runs = []
    gate = threading.Event()

    def slow():
        runs.append(1)
        gate.wait(5)
        return "v"

    out = []
    threads = [threading.Thread(target=lambda: out.append(cache.get_or_run("k", slow))) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    gate.set()
    for t in threads:
        t.join(5)
    assert len(runs) == 1 and sorted(out) == [("v", False)] + [("v", True)] * 3


# -- tool errors become observations -------------------------------------------------------------

def test_tool_error_is_an_observation_sent_with_its_call_id():
    tool, calls = counting_tool(fail=[ToolError("refused: not allowed")])
    server = FakeServer([completion(("lookup", {"x": 2})), completion(content="ok")])
    result = agent(server, [tool]).run("q")
    obs = result.steps[0].observations[0]
    assert obs.error and obs.attempts == 1 and len(calls) == 1  # a refusal is not retried
    sent = server.tool_messages(1)
    assert sent[0]["tool_call_id"] == result.steps[0].actions[0].id
    assert json.loads(sent[0]["content"]) == {"error": "refused: not allowed", "tool": "lookup"}


def test_transient_error_retried_once_then_succeeds():
    tool, calls = counting_tool(fail=[ToolError("busy", retryable=True)])
    server = FakeServer([completion(("lookup", {"x": 3})), completion(content="ok")])
    obs = agent(server, [tool]).run("q").steps[0].observations[0]
    assert obs.content == {"value": 30} and obs.attempts == 2 and len(calls) == 2


def test_failing_tool_retried_at_most_once():
    tool, calls = counting_tool(fail=[RuntimeError("down"), RuntimeError("still down"), RuntimeError("never reached")])
    server = FakeServer([completion(("lookup", {"x": 4})), completion(content="ok")])
    obs = agent(server, [tool]).run("q").steps[0].observations[0]
    assert len(calls) == 2 and obs.attempts == 2
    assert obs.content == {"error": "RuntimeError: still down", "tool": "lookup"}


def test_error_not_cached_so_a_later_identical_call_runs_again():
    tool, calls = counting_tool(fail=[ToolError("refused")])
    server = FakeServer([completion(("lookup", {"x": 5})), completion(("lookup", {"x": 5})), completion(content="ok")])
    result = agent(server, [tool]).run("q")
    assert len(calls) == 2 and result.steps[1].observations[0].content == {"value": 50}


def test_bad_arguments_unknown_tool_and_unparsable_calls_are_observations():
    tool, calls = counting_tool()
    server = FakeServer([completion(("lookup", {"y": 1}), ("nope", {"x": 1}), ("lookup", "{not json")),
                         completion(content="ok")])
    result = agent(server, [tool]).run("q")
    contents = [o.content for o in result.steps[0].observations]
    assert calls == []
    assert all(set(c) == {"error", "tool"} for c in contents)
    assert "bad arguments" in contents[0]["error"] and "unknown tool" in contents[1]["error"]
    assert "not a JSON object" in contents[2]["error"]
    assert result.unparsable_calls == 2  # the unknown name and the broken JSON
    assert [m["tool_call_id"] for m in server.tool_messages(1)] == [a.id for a in result.steps[0].actions]


def test_offline_web_search_is_unavailable_not_retried():
    server = FakeServer([completion(("web_search", {"query": "copper price"})), completion(content="offline")])
    obs = agent(server, [web_tool()]).run("copper?").steps[0].observations[0]
    assert obs.error and obs.attempts == 1 and not obs.cached
    assert obs.content["tool"] == "web_search" and "unavailable" in obs.content["error"]


# -- iteration limit -------------------------------------------------------------------------------

def test_iteration_limit_answers_with_what_it_has_and_says_so():
    tool, calls = counting_tool(cacheable=False)
    looping = [completion(("lookup", {"x": i})) for i in range(3)]
    server = FakeServer([*looping, completion(content="partial answer")])
    result = agent(server, [tool], max_iterations=3).run("q")
    assert result.stopped_by_limit and len(calls) == 3
    assert result.iterations == 4  # three tool turns, then the answering turn
    assert [r["tool_choice"] for r in server.requests] == ["auto", "auto", "auto", "none"]
    assert result.answer.startswith("[Stopped after 3 tool turns") and result.answer.endswith("partial answer")
    assert "used all your tool turns" in server.requests[-1]["messages"][-1]["content"]


def test_first_turn_tool_choice_applies_to_the_first_turn_only():
    tool, _ = counting_tool()
    server = FakeServer([completion(("lookup", {"x": 1})), completion(content="ok")])
    agent(server, [tool], first_tool_choice="required").run("q")
    assert [r["tool_choice"] for r in server.requests] == ["required", "auto"]


def test_default_iteration_limit_is_six():
    tool, _ = counting_tool(cacheable=False)
    server = FakeServer([*(completion(("lookup", {"x": i})) for i in range(6)), completion(content="x")])
    a = agent(server, [tool])
    result = a.run("q")
    assert a.max_iterations == 6 and result.stopped_by_limit and result.iterations == 7


def test_server_refusal_ends_the_run_without_raising():
    bad = httpx.Response(400, json={"error": {"message": "prompt too long", "type": "invalid_request_error",
                                              "param": "messages", "code": "context_length_exceeded"}})
    server = FakeServer([bad])
    result = agent(server, [counting_tool()[0]]).run("q")
    assert result.error and "prompt too long" in result.error and result.answer.startswith("[No answer")


# -- parallel calls --------------------------------------------------------------------------------

def test_parallel_calls_run_concurrently_and_answer_in_order():
    barrier = threading.Barrier(3, timeout=5)  # passes only if all three calls run at the same time

    def run(x: int) -> dict[str, Any]:
        barrier.wait()
        return {"x": x}

    tool = Tool(name="lookup", description="t", parameters=SCHEMA, run=run)
    server = FakeServer([completion(("lookup", {"x": 1}), ("lookup", {"x": 2}), ("lookup", {"x": 3})),
                         completion(content="ok")])
    result = agent(server, [tool]).run("q")
    assert [o.content for o in result.steps[0].observations] == [{"x": 1}, {"x": 2}, {"x": 3}]
    sent = server.tool_messages(1)
    assert [m["tool_call_id"] for m in sent] == [a.id for a in result.steps[0].actions]
    assistant = [m for m in server.requests[1]["messages"] if m["role"] == "assistant"][0]
    assert [c["id"] for c in assistant["tool_calls"]] == [a.id for a in result.steps[0].actions]


def test_parallel_calls_take_the_time_of_the_slowest():
    tool, _ = counting_tool(delay_s=0.5)
    server = FakeServer([completion(*[("lookup", {"x": i}) for i in range(4)]), completion(content="ok")])
    step = agent(server, [tool]).run("q").steps[0]
    assert step.tools_latency_s < 1.5  # four 0.5 s calls, sequential would be 2 s


# -- observations stay small and valid JSON ---------------------------------------------------------

def test_long_observation_trimmed_to_valid_json():
    def run(x: int) -> dict[str, Any]:
        return {"columns": ["a"], "rows": [["v" * 50] for _ in range(200)], "row_count": 200, "truncated": False}

    tool = Tool(name="lookup", description="t", parameters=SCHEMA, run=run)
    server = FakeServer([completion(("lookup", {"x": 1})), completion(content="ok")])
    agent(server, [tool], max_observation_chars=800).run("q")
    content = server.tool_messages(1)[0]["content"]
    parsed = json.loads(content)
    assert len(content) <= 800 and parsed["truncated"] is True and 0 < len(parsed["rows"]) < 200


def test_trace_callback_sees_every_step():
    tool, _ = counting_tool()
    seen = []
    server = FakeServer([completion(("lookup", {"x": 1}), content="I will look it up"), completion(content="10")])
    agent(server, [tool], on_step=seen.append).run("q")
    assert [(s.iteration, s.thought, [a.name for a in s.actions], len(s.observations)) for s in seen] == [
        (1, "I will look it up", ["lookup"], 1), (2, "10", [], 0)]
    json.dumps([s.to_dict() for s in seen])  # a trace is serialisable as it is


def test_max_iterations_must_be_positive():
    with pytest.raises(ValueError):
        agent(FakeServer([]), [counting_tool()[0]], max_iterations=0)
