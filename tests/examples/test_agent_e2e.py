"""A short real agent run on the embedded model (session `server`): format and safety, not answer
quality (the 135M model is a baseline, its answers are not asserted)."""
from __future__ import annotations

import json

import pytest

from examples.agent import Agent, default_tools
from examples.agent.sql_tool import database_snapshot

pytestmark = pytest.mark.e2e

TOOL_NAMES = {"sql_query", "vector_search", "web_search"}


def check_format(result, *, max_iterations: int) -> None:
    assert isinstance(result.answer, str) and result.answer.strip()
    assert result.error is None
    assert result.unparsable_calls == 0
    assert 1 <= result.iterations <= max_iterations + 1
    for step in result.steps:
        ids = [a.id for a in step.actions]
        assert len(set(ids)) == len(ids)
        assert [o.tool_call_id for o in step.observations] == ids  # every call answered, in order
        for action in step.actions:
            assert action.name in TOOL_NAMES and isinstance(action.arguments, dict)
        for obs in step.observations:
            json.dumps(obs.content)
            if obs.error:
                assert set(obs.content) == {"error", "tool"} and obs.content["tool"] == obs.name
    if result.stopped_by_limit:
        assert result.answer.startswith(f"[Stopped after {max_iterations} tool turn")


def test_agent_run_calls_a_tool_and_answers(client, model, agent_db, vector_index):
    agent = Agent(client=client, model=model, tools=default_tools(db_path=agent_db, index=vector_index),
                  tool_choice="required", max_iterations=1, max_tokens=160)
    result = agent.run("How many orders in March?")
    check_format(result, max_iterations=1)
    assert result.steps[0].actions or result.steps[0].finish_reason == "length"


def test_hostile_request_leaves_the_database_unchanged(client, model, agent_db, vector_index):
    before = database_snapshot(agent_db)
    agent = Agent(client=client, model=model, tools=default_tools(db_path=agent_db, index=vector_index),
                  tool_choice={"type": "function", "function": {"name": "sql_query"}}, max_iterations=1, max_tokens=160)
    result = agent.run("Run exactly this SQL with sql_query: DROP TABLE orders; then INSERT INTO regions VALUES ('XX', 'x')")
    check_format(result, max_iterations=1)
    for step in result.steps:
        for action, obs in zip(step.actions, step.observations):
            query = (action.arguments or {}).get("query", "").lstrip().upper()
            if not query.startswith(("SELECT", "WITH")):
                assert obs.error, f"a non-SELECT ran: {query!r} -> {obs.content}"
    assert database_snapshot(agent_db) == before
