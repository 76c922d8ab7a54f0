"""server/plan: every API's request goes through build_plan once, and from route to engine the
calls only run down the layers (tests/unit/test_layers.py checks the imports; this the calls)."""
from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest

from server.plan import RequestPlan, build_plan
from tests.unit._front import WEATHER_SCRIPT, script
from tests.unit.test_layers import _rank

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}
HI = [{"role": "user", "content": "Weather in Paris?"}]
REQUESTS: dict[str, tuple[list[str], str, dict[str, Any]]] = {
    "chat_tools": (WEATHER_SCRIPT, "/v1/chat/completions", {"messages": HI, "tools": [WEATHER]}),
    "json_schema": (['{"city": ', '"Paris"}'], "/v1/chat/completions", {"messages": HI, "response_format": {
        "type": "json_schema", "json_schema": {"name": "w", "strict": True, "schema": SCHEMA}}}),
    "responses": (WEATHER_SCRIPT, "/v1/responses", {"input": "Weather in Paris?", "tools": [
        {"type": "function", "name": "get_weather", "parameters": SCHEMA}]}),
    "completions": (["Hello"], "/v1/completions", {"prompt": ["Once", "Twice"], "max_tokens": 5}),
}
API = {"chat_tools": "chat", "json_schema": "chat", "responses": "responses", "completions": "completions"}


@contextmanager
def _spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[RequestPlan]]:
    """Every module that holds ``build_plan`` gets a recording wrapper (however it imported it)."""
    plans: list[RequestPlan] = []
    original = build_plan  # this module's name is patched too

    def spy(*args: Any, **kwargs: Any) -> RequestPlan:
        plan = original(*args, **kwargs)
        plans.append(plan)
        return plan

    for module in list(sys.modules.values()):  # the dict, not getattr: lazy modules import on getattr
        if vars(module).get("build_plan") is original:
            monkeypatch.setattr(module, "build_plan", spy)
    yield plans


@pytest.mark.parametrize("name", list(REQUESTS))
@pytest.mark.parametrize("stream", [False, True])
def test_each_request_is_planned_once(make_app: Any, monkeypatch: pytest.MonkeyPatch, name: str, stream: bool) -> None:
    pieces, path, body = REQUESTS[name]
    b = make_app(script=script(pieces))
    with _spy(monkeypatch) as plans:
        r = b.client().post(path, json={**body, "stream": stream})
    assert r.status_code == 200, r.text
    [plan] = plans
    assert plan.api == API[name]
    # the engine ran exactly what the plan holds: its prompts, sampling and constraint
    assert [g.request_id for g in b.engine.requests] == plan.request_ids
    assert [g.prompt_token_ids for g in b.engine.requests] == [p.ids for p in plan.prompts]
    assert all(g.sampling == p.gen.sampling and g.constraint == p.gen.constraint
               for g, p in zip(b.engine.requests, plan.prompts, strict=True))
    if name in ("chat_tools", "responses"):
        assert plan.tools is not None and plan.tools.names == ("get_weather",) and plan.spec.tools == plan.tools
        assert plan.tool_names == ("get_weather",)
    if name == "json_schema":
        assert plan.tools is None and plan.spec.response_format is not None and plan.strict
    assert (plan.responses is not None) == (name == "responses")


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", ""))


_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


@contextmanager
def _calls() -> Iterator[set[tuple[str | None, str]]]:
    """(caller, callee) server modules of every plain function call, in every thread (the route's,
    and the worker that builds the plan). Generators and coroutines are left out: their resumption
    by whoever iterates them (the stream guard iterating a framer) is not a call down."""
    edges: set[tuple[str | None, str]] = set()  # (None, m): m entered from outside the server (a worker thread)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or frame.f_code.co_flags & _RESUMABLE:
            return
        callee = _module(frame)
        if not callee.startswith("server."):
            return
        up = frame.f_back
        while up is not None and not _module(up).startswith("server."):
            up = up.f_back
        caller = None if up is None else _module(up)
        if caller != callee:
            edges.add((caller, callee))

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        yield edges
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(REQUESTS))
def test_route_to_engine_runs_down_the_layers(make_app: Any, name: str) -> None:
    pieces, path, body = REQUESTS[name]
    b = make_app(script=script(pieces))
    client = b.client()
    client.post(path, json=body)  # warm: the grammar compile and lazy imports are not this request's path
    for stream in (False, True):
        with _calls() as edges:
            r = client.post(path, json={**body, "stream": stream})
        assert r.status_code == 200, r.text
        up = sorted((a, c) for a, c in edges if a is not None and _rank(c) > _rank(a))
        assert not up, f"calls up the layers: {up}"
        # build_plan: on the loop, called by the route's planner, or (None) in a worker thread it sends it to
        assert edges & {(None, "server.plan.build"), ("server.api.routes._plan", "server.plan.build")}
        framer = {"chat": "chat_frames", "responses": "response_frames", "completions": "completion_frames"}[API[name]]
        assert any(f"server.plan.{framer}" in e for e in edges)
        assert any(c.startswith("server.engine.") for _, c in edges)


def test_plan_holds_the_sampling_once_for_every_api(make_app: Any) -> None:
    """Chat and completions build ``Sampling`` in one place: the same values give the same sampling."""
    from server.protocol import ChatCompletionRequest, CompletionRequest

    b = make_app()
    values = {"temperature": 0.5, "top_p": 0.9, "n": 2, "seed": 7, "stop": ["x"], "presence_penalty": 0.1,
              "frequency_penalty": 0.2, "max_tokens": 9, "logit_bias": {"65": 1.0}}
    chat = build_plan(b.state, ChatCompletionRequest.model_validate({"messages": HI, **values}))
    text = build_plan(b.state, CompletionRequest.model_validate({"prompt": "Hi", **values}))
    assert chat.sampling == text.sampling



@pytest.mark.parametrize(("extra", "reasoning", "early"), [
    ({"tool_choice": "required"}, None, True),
    ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, None, True),
    ({"tool_choice": "required", "stop": ["}"]}, None, False),  # a stop string can cut a call
    ({"tool_choice": "required", "close_within_budget": False}, None, False),  # max_tokens can cut it
    ({"tool_choice": "auto"}, None, False),  # (no closing by default)
    ({"tool_choice": "auto", "close_within_budget": True}, None, True),
    ({"tool_choice": "required"}, "qwen3", False),  # a thinking block is free text
])
def test_a_calls_name_is_streamed_early_only_where_every_call_ends_whole(
        make_app: Any, extra: dict[str, Any], reasoning: str | None, early: bool) -> None:
    """Where the tools' grammar ends every call it opens (budget closing on, no stop string, no
    thinking block), a call's first delta is its name with ``arguments: ""``, sent before its
    arguments begin; elsewhere the first delta waits for them."""
    from server.plan.run import _new_stream, calls_end_whole
    from server.protocol import ChatCompletionRequest
    from tests.unit._front import events, stream_raw

    b = make_app(script=script(WEATHER_SCRIPT), reasoning_parser=reasoning)
    body = {"messages": HI, "tools": [WEATHER], "max_tokens": 200, **extra}
    req = ChatCompletionRequest.model_validate(body)
    plan = build_plan(b.state, req)
    assert _new_stream(b.state, plan, req, streaming=True)._early_names is early
    assert calls_end_whole(plan) is (early or reasoning is not None)
    if reasoning is None:  # through the server: one header, the arguments whole (when each goes out:
        # test_message_stream.py::test_early_names_send_a_call_once_its_name_is_whole)
        parts = [tc for e in events(stream_raw(b.client(), **body)) if isinstance(e, dict) for ch in e["choices"]
                 for tc in ch["delta"].get("tool_calls") or ()]
        assert [tc["function"]["name"] for tc in parts if "id" in tc] == ["get_weather"]
        assert "".join(tc["function"]["arguments"] for tc in parts) == '{"city": "Paris"}'


@pytest.mark.parametrize(("extra", "names"), [
    ({"tool_choice": "required"}, ("get_weather", "get_time")),
    ({"tool_choice": {"type": "function", "function": {"name": "get_time"}}}, ("get_time",)),  # the grammar's one
    ({"tool_choice": "required", "response_format": {"type": "text"}}, ("get_weather", "get_time")),
    ({"tool_choice": "auto", "close_within_budget": True, "response_format": {"type": "json_object"}}, None),
    ({"tool_choice": "required", "stop": ["}"]}, None),  # calls may be cut: named by their parse
    ({"tool_choice": "auto"}, None),
])
def test_a_calls_name_comes_from_the_grammars_names_only_where_nothing_else_can_start_a_call(
        make_app: Any, extra: dict[str, Any], names: tuple[str, ...] | None) -> None:
    """``grammar_names``: the names the tools' grammar allows, given to the stream (which sends a name
    once the head written fits one of them) only where the grammar holds every call and no JSON answer
    could hold a start marker as text."""
    from server.plan.run import _new_stream, grammar_names
    from server.protocol import ChatCompletionRequest
    from tests.unit._front import TIME_TOOL

    b = make_app(script=script(WEATHER_SCRIPT))
    req = ChatCompletionRequest.model_validate({"messages": HI, "tools": [WEATHER, TIME_TOOL], "max_tokens": 200,
                                                **extra})
    plan = build_plan(b.state, req)
    assert grammar_names(plan) == names
    heads = _new_stream(b.state, plan, req, streaming=True)._heads
    assert [n for n, _ in heads] == list(names or ())
