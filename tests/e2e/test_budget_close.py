"""Budget-aware closing through the real engine (vLLM + SmolLM2), streamed and not.

A strict answer or a required call that reaches ``max_tokens`` comes back complete and valid,
marked ``closed_by_budget``; a budget below the shortest answer is a 400 naming the minimum.
"""
from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from tests.unit.budget_cases import SCHEMAS, TOOLS

NAMES = ["required nested", "arrays", "pattern and format", "top-level array"]


def _ask(client, model, schema, *, max_tokens, stream, **extra):
    kw = dict(model=model, temperature=0, max_tokens=max_tokens,
              messages=[{"role": "user", "content": "Describe a person as JSON, with many details."}],
              response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}},
              extra_body=extra or None)
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **kw))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        last = next(c.choices[0] for c in reversed(chunks) if c.choices and c.choices[0].finish_reason)
        return text, last.finish_reason, (last.model_extra or {}).get("closed_by_budget")
    choice = client.chat.completions.create(**kw).choices[0]
    return choice.message.content, choice.finish_reason, (choice.model_extra or {}).get("closed_by_budget")


def _floor(http, model, schema):
    body = {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}}
    r = http.post("/v1/chat/completions", json=body)
    if r.status_code == 200:
        return 1
    err = r.json()["error"]
    assert r.status_code == 400 and err["code"] == "max_tokens_too_small" and err["param"] == "max_tokens", err
    return int(err["message"].split(" takes ")[1].split()[0])


@pytest.mark.parametrize("name", NAMES)
def test_strict_answers_close_valid_at_every_budget(client, http, model, name):
    schema = SCHEMAS[name]
    floor = _floor(http, model, schema)
    closed = 0
    for budget in (floor, floor + 3, floor + 9, floor + 20):
        answers = {}
        for stream in (False, True):
            text, finish, mark = _ask(client, model, schema, max_tokens=budget, stream=stream)
            errors = [e.message for e in Draft202012Validator(schema).iter_errors(json.loads(text))]
            assert not errors, (budget, stream, text, errors)
            assert mark is (True if finish == "length" else None), (budget, stream, finish, mark)
            closed += finish == "length"
            answers[stream] = (text, finish, mark)
        assert answers[False] == answers[True], answers  # streamed and not agree byte for byte
    assert closed, "no answer reached its budget"


def test_a_budget_below_the_shortest_answer_is_a_400(http, model):
    schema = SCHEMAS["required nested"]
    floor = _floor(http, model, schema)
    assert floor > 5
    body = {"model": model, "max_tokens": floor - 1, "messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and str(floor) in r.json()["error"]["message"], r.text
    r = http.post("/v1/chat/completions", json={**body, "close_within_budget": False})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length", r.text
    assert "closed_by_budget" not in r.json()["choices"][0]


@pytest.mark.parametrize("stream", [False, True])
def test_a_required_call_closes_inside_a_tight_budget(client, model, stream):
    name, params = TOOLS[1]
    kw = dict(model=model, temperature=0, max_tokens=60, tool_choice="required",
              messages=[{"role": "user", "content": "Call the tool with long, detailed arguments."}],
              tools=[{"type": "function", "function": {"name": name, "parameters": params}}])
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **kw))
        args = "".join(tc.function.arguments or "" for c in chunks if c.choices
                       for tc in (c.choices[0].delta.tool_calls or []))
        last = next(c.choices[0] for c in reversed(chunks) if c.choices and c.choices[0].finish_reason)
        finish, mark = last.finish_reason, (last.model_extra or {}).get("closed_by_budget")
    else:
        choice = client.chat.completions.create(**kw).choices[0]
        args = choice.message.tool_calls[0].function.arguments
        finish, mark = choice.finish_reason, (choice.model_extra or {}).get("closed_by_budget")
    errors = [e.message for e in Draft202012Validator(params).iter_errors(json.loads(args))]
    assert not errors, (args, errors)
    assert finish in ("length", "tool_calls") and mark is (True if finish == "length" else None), (finish, mark)


def test_a_responses_budget_below_the_floor_names_max_output_tokens(http, model):
    """The floor's 400 on /v1/responses names the Responses parameters (``max_output_tokens``,
    ``text.format``), in its ``param`` and in its message, not chat's."""
    schema = SCHEMAS["required nested"]
    body = {"model": model, "input": "x", "max_output_tokens": 1,
            "text": {"format": {"type": "json_schema", "name": "x", "schema": schema, "strict": True}}}
    r = http.post("/v1/responses", json=body)
    err = r.json()["error"]
    assert r.status_code == 400 and err["code"] == "max_tokens_too_small" and err["param"] == "max_output_tokens", err
    assert "'max_output_tokens' is 1" in err["message"] and "text.format" in err["message"], err
    assert "max_completion_tokens" not in err["message"] and "response_format" not in err["message"], err
