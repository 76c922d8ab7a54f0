"""bench/stream_cost.py, bench/route_cost.py and bench/prepare_cost.py run (small sizes), so the tables they print
stay real."""
from __future__ import annotations

import asyncio

import pytest

from bench import prepare_cost, stream_cost


@pytest.mark.parametrize("workload", stream_cost.WORKLOADS)
def test_stream_cost_measures_a_whole_stream(workload):
    cost = asyncio.run(stream_cost.measure(workload, 64, 1))
    assert 0 < cost < 100_000  # CPU microseconds per token


@pytest.mark.parametrize(("workload", "api"), [("tools", "chat"), ("short_calls", "chat"), ("plain", "completions"),
                                               ("plain", "responses"), ("tools", "responses")])
def test_route_cost_streams_through_both_apps(workload, api):
    from bench import route_cost

    costs = route_cost.measure(workload, 8, api=api, requests=8, concurrency=2)  # (a route's error would raise)
    assert set(costs) == {"gramserve", "bare"} and all(0 < c < 1_000_000 for c in costs.values())  # µs a request


def test_short_calls_are_a_turn_of_whole_calls_in_small_chunks():
    from tool_parsers import get_tool_parser

    pieces = stream_cost._pieces("short_calls", 200)
    assert len(pieces) == 200 and max(map(len, pieces)) <= 12  # (a head of many chunks)
    parsed = get_tool_parser("hermes").parse("".join(pieces), final=False)
    calls = [c for c in parsed.tool_calls if c.complete]
    assert len(calls) >= 3 and {c.name for c in calls} == {"write_note"}
    assert len({c.arguments for c in calls}) == len(calls)  # (no repeats: the guard would end the turn)


def test_route_cost_bare_app_sends_every_chunk_then_usage_and_done(make_app):
    from bench.route_cost import BareApp

    built = make_app(script=lambda req: ["a", "b", "c"])
    raw = b'{"messages": [{"role": "user", "content": "hi"}], "stream": true}'
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": raw, "more_body": False}]

    async def receive():
        return messages.pop()

    async def send(message):
        sent.append(message)

    asyncio.run(BareApp(built.state)({"type": "http"}, receive, send))
    bodies = [m["body"] for m in sent[1:]]
    assert len(bodies) == 4 and bodies[-1].endswith(b"data: [DONE]\n\n") and b'"usage"' in bodies[-1]
    assert b"".join(bodies[:3]).count(b'"content"') == 3


def test_prepare_cost_requests_are_valid_chat_requests():
    from server.protocol import ChatCompletionRequest

    bodies = prepare_cost.requests(salt="x")
    assert {"plain", "tools x1", "tools x8", "tools x32", "json_schema"} == set(bodies)
    for body in bodies.values():
        ChatCompletionRequest.model_validate(body)
    assert bodies["tools x8"]["tools"][7]["function"]["description"].endswith("(x).")


def test_grammar_cost_table_divides_by_tokens_and_ratios_to_plain():
    from bench.grammar_cost import Batch, parser, summarise, table

    rows = summarise("standin", 49152, {"free text": Batch(tokens=1000, requests=4, wall_s=2.0, core_s=1.0, worker_s=1.0),
                                        "json_schema": Batch(tokens=500, requests=4, wall_s=2.0, core_s=1.0, worker_s=0.5)})
    assert [round(r["ms_per_tok"], 3) for r in rows] == [2.0, 3.0]
    assert [round(r["ratio"], 2) for r in rows] == [1.0, 1.5]
    assert rows[1]["tok_s"] == 250 and rows[1]["tok_per_req"] == 125
    text = table(rows)
    assert "| standin | 49,152 | json_schema | 3.000 | 2.000 / 1.000 | 1.50 | 250 | 125.0 |" in text
    assert parser().parse_args(["--vocabs", "qwen3", "--rounds", "2"]).vocabs == "qwen3"


def test_prefix_stability_tells_a_stable_template_from_one_that_drops_thinking():
    """hermes renders a transcript's start the same whatever follows; Qwen3's template drops the
    thinking of a turn once a user message follows it, so the prompt before it is no prefix."""
    from bench.prefix_stability import STEPS, check_template, first_difference, step_pairs
    from chat_templates import BUILTIN_TEMPLATES
    from tests.unit.family_cases import TEMPLATES

    assert first_difference("ab", "abc") is None and first_difference("abx", "aby") == 2
    pairs = step_pairs(STEPS[1], reasoning=True)
    assert pairs and all(len(a) < len(b) and b[:len(a)] == a and a[-1]["role"] == "tool" for a, b in pairs)
    hermes = check_template("builtin:hermes", BUILTIN_TEMPLATES["hermes"].read_text())
    assert set(hermes.values()) == {"prefix"} and len(hermes) == 4
    qwen3 = check_template("qwen3", (TEMPLATES / "qwen3.jinja").read_text())
    assert qwen3["next user turn"] == "prefix"
    assert qwen3["after a tool result, thinking"].startswith("differs after 4 messages")


def test_prepare_cost_long_history_is_a_valid_growing_agent_transcript():
    from server.protocol import ChatCompletionRequest

    short, long = prepare_cost.long_history(2), prepare_cost.long_history(5)
    assert len(short) == 1 + 4 * 2 and long[: len(short)] == short  # a turn adds four messages, the past unchanged
    ChatCompletionRequest.model_validate({"messages": long + [{"role": "user", "content": "next"}]})
    calls = [m for m in long if m["role"] == "assistant" and m.get("tool_calls")]
    results = [m for m in long if m["role"] == "tool"]
    assert [c["tool_calls"][0]["id"] for c in calls] == [r["tool_call_id"] for r in results] == [f"call_{k}" for k in range(5)]
    assert all(len(r["content"]) > 1500 for r in results)  # each result carries its log (about 500 tokens)
