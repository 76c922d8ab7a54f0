"""The client libraries users point at gramserve, against the real server and model.

Each library is pinned in the ``test`` extra. The tiny model cannot be relied on to finish a
multi-turn agent run sensibly, so these tests judge protocol and format, not answer quality:
the library accepts every answer, structured output parses into the requested type, every
tool call names a declared tool and its arguments fit the tool's parameters.
"""
from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from tests.server_process import API_KEY

pytestmark = pytest.mark.e2e

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm: no network at import
WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                  "required": ["city"], "additionalProperties": False}
CHAT_WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.",
                                                 "parameters": WEATHER_PARAMS}}
Q_WEATHER = "What is the weather in Paris? Use the tool."
Q_CITY = "Name one city in France and its country."


class City(BaseModel):
    name: str
    country: str


def get_weather(city: str) -> str:
    """Current weather in a city."""
    return json.dumps({"city": city, "sky": "sunny", "temp_c": 21})


def fits(arguments: str | dict[str, Any], schema: dict[str, Any] = WEATHER_PARAMS) -> bool:
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    return not list(Draft202012Validator(schema).iter_errors(args))


@pytest.fixture(scope="module")
def base(server) -> str:
    return server.base + "/v1"


# --------------------------------------------------------------------------- openai SDK


def test_openai_sdk_responses_create_stream_parse(base: str, model: str) -> None:
    from openai import OpenAI

    c = OpenAI(base_url=base, api_key=API_KEY, max_retries=0)
    r = c.responses.create(model=model, input="Say hello.", max_output_tokens=32, temperature=0)
    assert r.status in ("completed", "incomplete") and r.output_text and r.usage.output_tokens > 0
    with c.responses.stream(model=model, input="Say hi.", max_output_tokens=200, temperature=0) as s:
        kinds = [e.type for e in s]
        final = s.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert final.output_text
    parsed = c.responses.parse(model=model, input=Q_CITY, text_format=City, max_output_tokens=64, temperature=0)
    assert isinstance(parsed.output_parsed, City)
    tools = [{"type": "function", "name": "get_weather", "description": "Current weather in a city.",
              "parameters": WEATHER_PARAMS, "strict": True}]
    r = c.responses.create(model=model, input=Q_WEATHER, tools=tools, tool_choice="required", max_output_tokens=64,
                           temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and all(o.name == "get_weather" and fits(o.arguments) for o in calls)
    follow = c.responses.create(model=model, previous_response_id=r.id, tools=tools, max_output_tokens=48,
                                temperature=0, input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                                       "output": get_weather("Paris")}])
    assert follow.previous_response_id == r.id and follow.status in ("completed", "incomplete")


def test_openai_sdk_chat_parse_and_stream(base: str, model: str) -> None:
    from openai import OpenAI

    c = OpenAI(base_url=base, api_key=API_KEY, max_retries=0)
    parsed = c.chat.completions.parse(model=model, messages=[{"role": "user", "content": Q_CITY}],
                                      response_format=City, max_tokens=64, temperature=0)
    assert isinstance(parsed.choices[0].message.parsed, City)
    with c.chat.completions.stream(model=model, messages=[{"role": "user", "content": Q_WEATHER}],
                                   tools=[CHAT_WEATHER], tool_choice="required", max_tokens=64,
                                   temperature=0) as s:
        for _ in s:
            pass
        msg = s.get_final_completion().choices[0].message
    assert msg.content is None and msg.tool_calls and all(fits(t.function.arguments) for t in msg.tool_calls)


# --------------------------------------------------------------------------- openai-agents


def _agents_responses(run: Any) -> list[Any]:
    """The model responses of an agent run, finished or stopped at max_turns."""
    return list(run.raw_responses)


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_openai_agents_tool_and_output_type(base: str, model: str, api: str) -> None:
    from agents import (Agent, MaxTurnsExceeded, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel,
                        Runner, function_tool, set_tracing_disabled)
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base, api_key=API_KEY, max_retries=0)
    llm = (OpenAIResponsesModel(model=model, openai_client=client) if api == "responses"
           else OpenAIChatCompletionsModel(model=model, openai_client=client))
    agent = Agent(name="weather", instructions="Answer with the tool's result.", model=llm,
                  tools=[function_tool(get_weather)], output_type=City,
                  model_settings=ModelSettings(max_tokens=96, temperature=0, tool_choice="required"))

    plain = Agent(name="city", instructions="Answer briefly.", model=llm, output_type=City,
                  model_settings=ModelSettings(max_tokens=96, temperature=0))

    async def go() -> tuple[Any, list[Any], Any]:
        city = (await Runner.run(plain, Q_CITY, max_turns=1)).final_output
        try:
            result = await Runner.run(agent, Q_WEATHER, max_turns=3)
        except MaxTurnsExceeded as exc:  # the tiny model may keep calling: the protocol is still checked
            return None, _agents_responses(exc.run_data), city
        return result.final_output, _agents_responses(result), city

    final, responses, city = asyncio.run(go())
    assert isinstance(city, City), "output_type alone: the answer is grammar-constrained to City"
    items = [item for r in responses for item in r.output]
    calls = [i for i in items if getattr(i, "type", None) == "function_call"]
    print(f"\n[openai-agents {api}] {len(responses)} model turns, {len(calls)} calls, final output {final!r}")
    assert calls, "tool_choice=required: the first turn is a tool call"
    assert all(c.name == "get_weather" and fits(c.arguments) for c in calls)
    assert final is None or isinstance(final, City)


# --------------------------------------------------------------------------- pydantic-ai


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_pydantic_ai_native_and_tool_output(base: str, model: str, api: str) -> None:
    from pydantic_ai import Agent, NativeOutput, ToolOutput
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=base, api_key=API_KEY)
    llm = OpenAIChatModel(model, provider=provider) if api == "chat" else OpenAIResponsesModel(model, provider=provider)
    settings = {"max_tokens": 96, "temperature": 0}
    native = Agent(llm, output_type=NativeOutput(City), model_settings=settings)
    assert isinstance(native.run_sync(Q_CITY).output, City)
    tool_out = Agent(llm, output_type=ToolOutput(City), model_settings=settings)
    assert isinstance(tool_out.run_sync(Q_CITY).output, City)


# --------------------------------------------------------------------------- langchain-openai


def test_langchain_openai_structured_tools_and_responses(base: str, model: str) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=model, base_url=base, api_key=API_KEY, max_tokens=96, temperature=0, max_retries=0)
    for method in ("json_schema", "function_calling"):
        assert isinstance(llm.with_structured_output(City, method=method).invoke(Q_CITY), City), method
    msg = llm.bind_tools([get_weather], tool_choice="get_weather").invoke(Q_WEATHER)
    assert msg.tool_calls and all(t["name"] == "get_weather" and fits(t["args"]) for t in msg.tool_calls)
    chunks = list(llm.bind_tools([get_weather], tool_choice="required").stream(Q_WEATHER))
    merged = chunks[0]
    for ch in chunks[1:]:
        merged += ch
    assert merged.tool_calls and all(fits(t["args"]) for t in merged.tool_calls)
    responses = ChatOpenAI(model=model, base_url=base, api_key=API_KEY, max_tokens=48, temperature=0,
                           use_responses_api=True, max_retries=0)
    assert responses.invoke("Say hello.").text
    assert isinstance(responses.with_structured_output(City, method="json_schema").invoke(Q_CITY), City)


# --------------------------------------------------------------------------- litellm


def test_litellm_completion_stream_tools_and_format(base: str, model: str) -> None:
    import litellm

    kw = {"model": f"openai/{model}", "api_base": base, "api_key": API_KEY, "max_tokens": 64, "temperature": 0}
    r = litellm.completion(messages=[{"role": "user", "content": "Say hello."}], **kw)
    assert r.choices[0].message.content
    text = "".join(c.choices[0].delta.content or "" for c in
                   litellm.completion(messages=[{"role": "user", "content": "Say hi."}], stream=True, **kw))
    assert text
    r = litellm.completion(messages=[{"role": "user", "content": Q_WEATHER}], tools=[CHAT_WEATHER],
                           tool_choice="required", **kw)
    calls = r.choices[0].message.tool_calls
    assert calls and all(c.function.name == "get_weather" and fits(c.function.arguments) for c in calls)
    r = litellm.completion(messages=[{"role": "user", "content": Q_CITY}], response_format=City, **kw)
    City.model_validate_json(r.choices[0].message.content)
