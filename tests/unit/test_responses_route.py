"""server/api/routes/responses.py and server/responses over HTTP with the scripted FakeEngine,
read raw and through the openai SDK."""
from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from server.config import Settings
from tests.unit._front import HELLO, WEATHER_SCRIPT, script

RESP = "/v1/responses"
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def sse(raw: str) -> list[dict[str, Any]]:
    """Responses events: each ``event: <type>`` line matches its data's type."""
    out = []
    for block in raw.strip().split("\n\n"):
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        data = json.loads(lines[1][6:])
        assert data["type"] == lines[0][7:]
        out.append(data)
    return out


def stream(client: Any, **body: Any) -> list[dict[str, Any]]:
    with client.stream("POST", RESP, json={"stream": True, **body}) as r:
        assert r.status_code == 200, r.read()
        return sse("".join(r.iter_text()))


def test_text_answer_object(make_app):
    b = make_app()
    r = b.client().post(RESP, json={"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 50})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "response" and body["id"].startswith("resp_") and body["status"] == "completed"
    [msg] = body["output"]
    assert msg["type"] == "message" and msg["role"] == "assistant" and msg["status"] == "completed"
    assert msg["content"] == [{"type": "output_text", "text": HELLO, "annotations": [], "logprobs": []}]
    assert body["usage"]["output_tokens"] == len(HELLO)
    assert body["usage"]["total_tokens"] == body["usage"]["input_tokens"] + len(HELLO)
    assert body["instructions"] == "Be brief." and body["max_output_tokens"] == 50
    sent = "".join(chr(t) for t in b.engine.requests[-1].prompt_token_ids)
    assert "system\nBe brief." in sent and "user\nHi" in sent  # the instructions: a system message


def test_length_cut_is_incomplete(make_app):
    b = make_app(script=script(["a" * 40]))
    body = b.client().post(RESP, json={"input": "Hi", "max_output_tokens": 5}).json()
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete"


@pytest.mark.parametrize("streamed", [False, True])
def test_a_call_the_budget_cut_is_an_incomplete_item(make_app, streamed):
    """A call the output ended inside (``max_output_tokens``) is an ``incomplete`` item, streamed or not,
    in an incomplete response; the same call whole is ``completed``."""
    b = make_app(script=script(WEATHER_SCRIPT))
    for budget, status in ((55, "incomplete"), (200, "completed")):
        body = {"input": "Weather in Paris?", "tools": [WEATHER], "max_output_tokens": budget}
        done = stream(b.client(), **body)[-1]["response"] if streamed else b.client().post(RESP, json=body).json()
        [call] = done["output"]
        assert call["type"] == "function_call" and call["status"] == status, call
        assert done["status"] == ("incomplete" if budget == 55 else "completed")


def test_function_call_items(make_app):
    b = make_app(script=script(WEATHER_SCRIPT))
    body = b.client().post(RESP, json={"input": "Weather in Paris?", "tools": [WEATHER],
                                       "tool_choice": "required"}).json()
    [call] = body["output"]
    assert call["type"] == "function_call" and call["name"] == "get_weather" and call["status"] == "completed"
    assert call["id"].startswith("fc_") and call["call_id"].startswith("call_")
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    assert b.engine.requests[-1].constraint is not None  # required: the grammar forces a call


def test_stream_event_sequence_for_text(make_app):
    b = make_app()
    ev = stream(b.client(), input="Hi")
    kinds = [e["type"] for e in ev]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e["sequence_number"] for e in ev] == list(range(len(ev)))
    deltas = [e["delta"] for e in ev if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == HELLO and len(deltas) == 3
    done = ev[-1]["response"]
    assert done["status"] == "completed" and done["output"][0]["content"][0]["text"] == HELLO
    assert len({e["item_id"] for e in ev if "item_id" in e}) == 1


def test_stream_function_call_events(make_app):
    b = make_app(script=script(WEATHER_SCRIPT))
    ev = stream(b.client(), input="Weather?", tools=[WEATHER], tool_choice="required")
    kinds = [e["type"] for e in ev]
    assert "response.output_text.delta" not in kinds
    added = next(e for e in ev if e["type"] == "response.output_item.added")
    assert added["item"]["type"] == "function_call" and added["item"]["name"] == "get_weather"
    args = "".join(e["delta"] for e in ev if e["type"] == "response.function_call_arguments.delta")
    assert json.loads(args) == {"city": "Paris"}
    done = next(e for e in ev if e["type"] == "response.function_call_arguments.done")
    assert done["arguments"] == args and done["name"] == "get_weather"
    assert ev[-1]["response"]["output"][0]["arguments"] == args


def test_stream_reasoning_then_text(make_app):
    b = make_app(script=script(["<think>", "ponder", "</think>", "Answer"]), reasoning_parser="qwen3")
    ev = stream(b.client(), input="Hi")
    items = ev[-1]["response"]["output"]
    assert [i["type"] for i in items] == ["reasoning", "message"]
    assert items[0]["content"] == [{"type": "reasoning_text", "text": "ponder"}]
    assert "".join(e["delta"] for e in ev if e["type"] == "response.reasoning_text.delta") == "ponder"
    assert [e["output_index"] for e in ev if e["type"] == "response.output_item.added"] == [0, 1]
    assert ev[-1]["response"]["usage"]["output_tokens_details"]["reasoning_tokens"] == len("ponder")


def test_store_continue_get_delete(make_app):
    b = make_app(script=script(WEATHER_SCRIPT))
    c = b.client()
    first = c.post(RESP, json={"input": "Weather in Paris?", "tools": [WEATHER]}).json()
    call = first["output"][0]
    b.engine.script = script(["Sunny."])
    second = c.post(RESP, json={"previous_response_id": first["id"], "tools": [WEATHER], "input": [
        {"type": "function_call_output", "call_id": call["call_id"], "output": "{\"sky\": \"clear\"}"}]})
    assert second.status_code == 200, second.text
    assert second.json()["previous_response_id"] == first["id"]
    sent = "".join(chr(t) for t in b.engine.requests[-1].prompt_token_ids)
    assert "Weather in Paris?" in sent and "get_weather" in sent and "clear" in sent  # the whole conversation
    assert c.get(f"{RESP}/{first['id']}").json() == first
    items = c.get(f"{RESP}/{first['id']}/input_items").json()
    assert items["object"] == "list" and items["data"][0]["content"] == "Weather in Paris?"
    assert c.delete(f"{RESP}/{first['id']}").json() == {"id": first["id"], "object": "response", "deleted": True}
    gone = c.get(f"{RESP}/{first['id']}")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"


def test_store_false_is_not_kept(make_app):
    c = make_app().client()
    body = c.post(RESP, json={"input": "Hi", "store": False}).json()
    assert c.get(f"{RESP}/{body['id']}").status_code == 404


def test_store_size_bound(make_app):
    c = make_app(settings=Settings(responses_store_size=2)).client()
    ids = [c.post(RESP, json={"input": "Hi"}).json()["id"] for _ in range(3)]
    assert [c.get(f"{RESP}/{i}").status_code for i in ids] == [404, 200, 200]


@pytest.mark.parametrize("body,status,param", [
    ({"input": [{"type": "web_search_call", "id": "x"}]}, 400, "input[0].type"),
    ({"input": [{"type": "function_call_output", "call_id": "call_nope", "output": "1"}]}, 400, "input[0].call_id"),
    ({"input": "Hi", "previous_response_id": "resp_unknown"}, 404, "previous_response_id"),
    ({"input": "Hi", "text": {"format": {"type": "json_schema", "name": "x", "strict": True,
                                         "schema": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}}},
     400, "text.format"),
    ({"input": "Hi", "tools": [{"type": "web_search"}]}, 400, "tools[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, 400,
     "input[0].content[0]"),
    ({"input": "Hi", "max_output_tokens": 0}, 400, "max_output_tokens"),
    ({"input": "Hi", "max_output_tokens": 100000}, 400, "max_output_tokens"),
    ({"input": "Hi", "tool_choice": "required"}, 400, "tool_choice"),
    ({"input": "Hi", "background": True}, 400, "background"),
    ({"input": []}, 400, "input"),
])
def test_bad_input_is_an_envelope_naming_param(make_app, body, status, param):
    r = make_app().client().post(RESP, json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] is not None and err["param"].startswith(param), err


# --------------------------------------------------------------------------- the openai SDK


def _sdk(b: Any) -> Any:
    from openai import OpenAI

    return OpenAI(base_url="http://testserver/v1", api_key="x", http_client=b.client(), max_retries=0)


def test_sdk_create_stream_and_parse(make_app):
    b = make_app()
    client = _sdk(b)
    r = client.responses.create(model="fake-model", input="Hi")
    assert r.output_text == HELLO and r.usage.output_tokens == len(HELLO)
    with client.responses.stream(model="fake-model", input="Hi") as s:
        texts = [e.delta for e in s if e.type == "response.output_text.delta"]
        final = s.get_final_response()
    assert "".join(texts) == HELLO and final.output_text == HELLO and final.status == "completed"

    class Person(BaseModel):
        name: str
        age: int

    b.engine.script = script(['{"name": "Ada", ', '"age": 36}'])
    parsed = client.responses.parse(model="fake-model", input="Who?", text_format=Person)
    assert parsed.output_parsed == Person(name="Ada", age=36)
    assert b.engine.requests[-1].constraint is not None  # strict json_schema: grammar-enforced


def test_sdk_stream_function_call(make_app):
    b = make_app(script=script(WEATHER_SCRIPT))
    client = _sdk(b)
    with client.responses.stream(model="fake-model", input="Weather?", tools=[WEATHER],
                                 tool_choice="required") as s:
        kinds = [e.type for e in s]
        final = s.get_final_response()
    assert "response.function_call_arguments.delta" in kinds
    [call] = final.output
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Paris"}


SHELL = {"type": "custom", "name": "shell", "description": "Run a shell command.",
         "format": {"type": "grammar", "syntax": "regex", "definition": r"ls( -[a-z]+)?"}}
SHELL_CALL = ["<tool_call>\n{\"name\": \"shell\", \"argu", "ments\": {\"input\": \"ls -", "la\"}}\n</tool_call>"]


def test_custom_tool_call_items_and_events(make_app):
    b = make_app(script=script(SHELL_CALL))
    c = b.client()
    body = c.post(RESP, json={"input": "List files.", "tools": [SHELL], "tool_choice": "required"}).json()
    [item] = body["output"]
    assert item["type"] == "custom_tool_call" and item["name"] == "shell" and item["input"] == "ls -la"
    ev = stream(c, input="List files.", tools=[SHELL], tool_choice="required")
    assert "".join(e["delta"] for e in ev if e["type"] == "response.custom_tool_call_input.delta") == "ls -la"
    assert next(e for e in ev if e["type"] == "response.custom_tool_call_input.done")["input"] == "ls -la"
    assert ev[-1]["response"]["output"][0]["input"] == "ls -la"
    b.engine.script = script(["Done."])
    follow = c.post(RESP, json={"previous_response_id": body["id"], "tools": [SHELL], "input": [
        {"type": "custom_tool_call_output", "call_id": item["call_id"], "output": "a.txt"}]})
    assert follow.status_code == 200, follow.text
    sent = "".join(chr(t) for t in b.engine.requests[-1].prompt_token_ids)
    assert '"input": "ls -la"' in sent and "a.txt" in sent


def test_accepted_but_ignored_fields_change_nothing(make_app):
    """The README's list of accepted-but-ignored parameters: each is served, and the prompt and
    sampling are what they are without it."""
    from server.responses.protocol import IGNORED_FIELDS

    b = make_app()
    c = b.client()
    values = {"service_tier": "auto", "prompt_cache_key": "k", "prompt_cache_retention": "24h",
              "safety_identifier": "u1", "user": "u1", "truncation": "auto", "include": ["reasoning.encrypted_content"],
              "stream_options": {"include_obfuscation": False}, "top_logprobs": 2, "max_tool_calls": 3}
    assert set(values) == set(IGNORED_FIELDS)
    plain = c.post(RESP, json={"input": "Hi"})
    base = b.engine.requests[-1]
    r = c.post(RESP, json={"input": "Hi", **values})
    assert r.status_code == 200 and r.json()["output"] == [
        {**plain.json()["output"][0], "id": r.json()["output"][0]["id"]}]
    assert b.engine.requests[-1].prompt_token_ids == base.prompt_token_ids
    assert b.engine.requests[-1].sampling == base.sampling
    chat_extras = {"store": True, "metadata": {"a": "b"}, "service_tier": "auto", "user": "u", "prompt_cache_key": "k",
                   "safety_identifier": "u", "modalities": ["text"], "prediction": {"type": "content", "content": "x"},
                   "web_search_options": {}, "verbosity": "low"}
    r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], **chat_extras})
    assert r.status_code == 200 and b.engine.requests[-1].sampling == base.sampling


def test_stream_failure_ends_with_error_and_response_failed(make_app):
    b = make_app(script=script(["Hel", "lo"]))
    original = b.engine.generate

    async def dies_after_first_chunk(req):
        async for c in original(req):
            yield c
            b.engine.dead = True

    b.engine.generate = dies_after_first_chunk
    ev = stream(b.client(), input="Hi")
    kinds = [e["type"] for e in ev]
    assert kinds[-3:] == ["response.output_item.done", "error", "response.failed"], kinds
    assert ev[-3]["item"]["status"] == "incomplete"
    assert ev[-2]["code"] == "engine_dead" and ev[-2]["message"]
    failed = ev[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "engine_dead"
    assert failed["output"][0]["content"][0]["text"] == "Hel"
    assert [e["sequence_number"] for e in ev] == list(range(len(ev)))
    assert "".join(e["delta"] for e in ev if e["type"] == "response.output_text.delta") == "Hel"


def test_an_answer_the_budget_closed_is_marked(make_app):
    """Budget-aware closing in Responses: the budget ended a complete strict answer (the engine
    closed it), so the response is incomplete and says ``closed_by_budget``; closing turned off,
    the same cut is not marked."""
    answer = '{"a":1}'
    fmt = {"format": {"type": "json_schema", "name": "x", "strict": True, "schema": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}}}
    b = make_app(script=script([answer, "zzz"]))
    body = {"input": "Hi", "text": fmt, "max_output_tokens": len(answer)}
    done = b.client().post(RESP, json=body).json()
    assert done["status"] == "incomplete" and done["closed_by_budget"] is True, done
    assert b.engine.requests[-1].constraint.closes
    streamed = stream(b.client(), **body)[-1]["response"]
    assert streamed["status"] == "incomplete" and streamed["closed_by_budget"] is True
    off = b.client().post(RESP, json={**body, "close_within_budget": False}).json()
    assert off["status"] == "incomplete" and "closed_by_budget" not in off
    assert not b.engine.requests[-1].constraint.closes
