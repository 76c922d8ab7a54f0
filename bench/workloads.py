"""The benchmark's request bodies: fixed prompts, fixed ``max_tokens``, temperature 0.

Each workload is a list of OpenAI chat request bodies (without ``model`` and ``stream``);
request ``i`` of a cell uses body ``i % len(bodies)``, so every target sees the same
requests in the same order.

- ``plain``: free text, ``ignore_eos`` so every request runs to ``max_tokens``.
- ``json_schema``: ``response_format`` schemas from the vendored JSONSchemaBench sample.
- ``tools``: BFCL ``simple_python`` questions and tools, ``tool_choice="required"``.
- ``agent``: one system prompt, three tools and a growing multi-turn history (tool calls,
  tool results, replies); request ``i`` is turn ``i % 6``, so requests share prefixes
  (the engine's prefix cache) and prompts grow. ``tool_choice="auto"``.
- ``tools_long``: one tool with a long free string argument (``minLength`` so the call is
  cut by ``max_tokens``, not ended early): the per-token cost of streaming arguments.
"""
from __future__ import annotations

import json
from typing import Any

__all__ = ["WORKLOADS", "build_workload", "JSON_SCHEMA_FILES"]

WORKLOADS = ("plain", "json_schema", "tools", "agent", "tools_long")

PLAIN_PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a refrigerator works, step by step, for a curious child.",
    "Describe a walk through a busy market in a city you love.",
    "Write a letter to a friend about learning to play the piano.",
    "Explain why the sky is blue and why sunsets are red.",
    "Tell the history of bread-making from ancient times to today.",
    "Describe the life cycle of a butterfly in detail.",
    "Write a travel guide for a weekend in a small mountain town.",
)

# Small schemas of several JSONSchemaBench subsets (tests/data/jsonschemabench/<subset>/<file>), each
# one gramserve enforces exactly under strict mode (so both servers constrain the same way).
JSON_SCHEMA_FILES = (
    ("Github_easy", "Github_easy---o10077.json"),
    ("Github_easy", "Github_easy---o12209.json"),
    ("Github_trivial", "Github_trivial---o12240.json"),
    ("Glaiveai2K", "Glaiveai2K---calculate_area_0544ef30.json"),
    ("JME", "JME_0.json"),
    ("Github_easy", "Github_easy---o13985.json"),
    ("Snowplow", "Snowplow---sp_167_Normalized.json"),
    ("JME", "JME_31.json"),
)

AGENT_SYSTEM = ("You are the operations assistant of a small logistics company. Use the tools to look "
                "things up before you answer, keep answers short and factual, and never invent order "
                "numbers. Today is Monday; the warehouse is in Rotterdam.")


def _fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": required}}}


AGENT_TOOLS = [
    _fn("get_order", "Look up an order by its number.", {"order_id": {"type": "string"}}, ["order_id"]),
    _fn("get_weather", "Current weather for a city.",
        {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"]),
    _fn("create_ticket", "Open a support ticket.",
        {"title": {"type": "string"}, "priority": {"type": "string", "enum": ["low", "normal", "high"]}},
        ["title", "priority"]),
]

# (user, tool, arguments, tool result, assistant reply)
AGENT_TURNS = (
    ("Where is order A-1042?", "get_order", {"order_id": "A-1042"},
     {"status": "in transit", "eta": "Wednesday"}, "Order A-1042 is in transit and due Wednesday."),
    ("Will the weather in Rotterdam delay the trucks today?", "get_weather", {"city": "Rotterdam"},
     {"temp_c": 7, "wind_kmh": 65, "conditions": "storm"}, "A storm with 65 km/h wind: expect delays."),
    ("Then open a ticket for the delay, high priority.", "create_ticket",
     {"title": "Storm delay for A-1042", "priority": "high"}, {"ticket": "T-881"}, "Opened ticket T-881."),
    ("And order B-7731?", "get_order", {"order_id": "B-7731"},
     {"status": "delivered", "date": "Friday"}, "Order B-7731 was delivered on Friday."),
    ("What is the weather in Hamburg in fahrenheit?", "get_weather", {"city": "Hamburg", "unit": "fahrenheit"},
     {"temp_f": 41, "conditions": "rain"}, "41 F and rain in Hamburg."),
    ("Open a low priority ticket to update the Hamburg route.", "create_ticket",
     {"title": "Update Hamburg route", "priority": "low"}, {"ticket": "T-882"}, "Opened ticket T-882."),
)

LONG_TOOL = _fn("write_file", "Write a text file to disk.",
                {"path": {"type": "string"},
                 # minLength: the model cannot close the string early (1000 characters, gramserve's
                 # default --max-schema-min-length is 1024: larger minimums grow the matcher's memory per token)
                 "content": {"type": "string", "minLength": 1000, "description": "the full text of the file"}},
                ["path", "content"])


def _json_schema_bodies() -> list[dict[str, Any]]:
    from evals.jsonschemabench import build_prompt
    from tests.testdata import VENDORED

    bodies = []
    for subset, name in JSON_SCHEMA_FILES:
        schema = json.loads((VENDORED / "jsonschemabench" / subset / name).read_text())["schema"]
        bodies.append({"messages": [{"role": "user", "content": build_prompt(schema)}],
                       "response_format": {"type": "json_schema",
                                           "json_schema": {"name": "out", "schema": schema, "strict": True}}})
    return bodies


def _tools_bodies(limit: int = 8) -> list[dict[str, Any]]:
    from tests.testdata import VENDORED

    lines = (VENDORED / "bfcl" / "simple_python.jsonl").read_text().splitlines()[:limit]
    bodies = []
    for line in lines:
        item = json.loads(line)
        bodies.append({"messages": item["messages"], "tools": item["tools"], "tool_choice": "required"})
    return bodies


def _agent_history(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": AGENT_SYSTEM}]
    for k, (user, tool, args, result, reply) in enumerate(AGENT_TURNS[:turns]):
        call_id = f"call_{k}"
        msgs += [
            {"role": "user", "content": user},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)},
            {"role": "assistant", "content": reply},
        ]
    return msgs


def _agent_bodies() -> list[dict[str, Any]]:
    return [{"messages": _agent_history(k) + [{"role": "user", "content": AGENT_TURNS[k][0]}],
             "tools": AGENT_TOOLS, "tool_choice": "auto"} for k in range(len(AGENT_TURNS))]


def build_workload(name: str, *, max_tokens: int, ignore_eos: bool = True) -> list[dict[str, Any]]:
    """The bodies of workload ``name`` with ``max_tokens`` and temperature 0."""
    if name == "plain":
        bodies = [{"messages": [{"role": "user", "content": p}]} for p in PLAIN_PROMPTS]
        if ignore_eos:
            for b in bodies:
                b["ignore_eos"] = True
    elif name == "json_schema":
        bodies = _json_schema_bodies()
    elif name == "tools":
        bodies = _tools_bodies()
    elif name == "agent":
        bodies = _agent_bodies()
    elif name == "tools_long":
        bodies = [{"messages": [{"role": "user", "content": "Write a long, detailed essay on the history of "
                                                             f"{topic} and save it to {topic.lower()}.txt."}],
                   "tools": [LONG_TOOL], "tool_choice": "required"} for topic in ("Rome", "Venice", "Lisbon")]
    else:
        raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    for b in bodies:
        b["max_tokens"] = max_tokens
        b["temperature"] = 0
    return bodies
