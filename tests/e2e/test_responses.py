"""/v1/responses with the real model: what the grammar guarantees on chat holds here too."""
from __future__ import annotations

import json
import re

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.server_process import API_KEY

pytestmark = pytest.mark.e2e

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
          "required": ["name", "age", "tags"], "additionalProperties": False}
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city", "strict": True,
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                           "unit": {"enum": ["c", "f"]}},
                          "required": ["city", "unit"], "additionalProperties": False}}
DATE_RE = r"20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]"
DATE_TOOL = {"type": "custom", "name": "set_date", "description": "Set the date.",
             "format": {"type": "grammar", "syntax": "regex", "definition": DATE_RE}}


def events(server, body):
    with httpx.Client(base_url=server.base, timeout=600, headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        with c.stream("POST", "/v1/responses", json={"stream": True, **body}) as r:
            assert r.status_code == 200
            out = []
            for line in r.iter_lines():
                if line.startswith("data: "):
                    out.append(json.loads(line[6:]))
            return out


def test_strict_json_schema_streamed_output_fits(server, model):
    ev = events(server, {"model": model, "input": "Describe a person as JSON.", "max_output_tokens": 200,
                         "temperature": 0.7, "seed": 1,
                         "text": {"format": {"type": "json_schema", "name": "person", "strict": True,
                                             "schema": PERSON}}})
    assert [e["sequence_number"] for e in ev] == list(range(len(ev)))
    final = ev[-1]
    assert final["type"] == "response.completed", final["type"]
    text = "".join(e["delta"] for e in ev if e["type"] == "response.output_text.delta")
    assert text == final["response"]["output"][0]["content"][0]["text"]
    assert not list(Draft202012Validator(PERSON).iter_errors(json.loads(text)))


def test_function_call_streamed_arguments_fit(server, model):
    ev = events(server, {"model": model, "input": "Weather in Oslo, in celsius?", "tools": [WEATHER],
                         "tool_choice": "required", "max_output_tokens": 64, "temperature": 0})
    args = "".join(e["delta"] for e in ev if e["type"] == "response.function_call_arguments.delta")
    calls = [i for i in ev[-1]["response"]["output"] if i["type"] == "function_call"]
    assert calls and args == "".join(c["arguments"] for c in calls)  # streamed = returned, in order
    for c in calls:
        assert not list(Draft202012Validator(WEATHER["parameters"]).iter_errors(json.loads(c["arguments"])))


def test_custom_tool_input_matches_its_regex(server, model):
    ev = events(server, {"model": model, "input": "Set the date to the first of May 2024.", "tools": [DATE_TOOL],
                         "tool_choice": "required", "max_output_tokens": 48, "temperature": 0})
    calls = [i for i in ev[-1]["response"]["output"] if i["type"] == "custom_tool_call"]
    assert calls, ev[-1]["response"]["output"]
    streamed = "".join(e["delta"] for e in ev if e["type"] == "response.custom_tool_call_input.delta")
    assert streamed == "".join(c["input"] for c in calls)
    for c in calls:
        assert re.fullmatch(DATE_RE, c["input"]), c["input"]
