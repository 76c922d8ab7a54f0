"""Planning on the event loop when cheap, in a thread when a step may block (server/loop_budget.py,
server/api/routes/_plan.py)."""
from __future__ import annotations

import asyncio

import pytest

from server.loop_budget import INLINE_MAX_BODY_BYTES, OffLoop, inline, may_block


def test_may_block_raises_only_inline() -> None:
    may_block()  # off the loop: nothing
    with inline(), pytest.raises(OffLoop):
        may_block()
    may_block()  # reset on leaving


def test_off_loop_passes_through_except_exception() -> None:
    def plan() -> None:
        try:
            may_block()
        except Exception:  # noqa: BLE001 - the plan's own handlers must not swallow it
            pytest.fail("OffLoop was caught as an Exception")

    with inline(), pytest.raises(OffLoop):
        plan()


def test_a_grammar_cache_miss_is_not_compiled_on_the_loop(hf_model_dir) -> None:
    import transformers

    from server.structured.constraints import JSON_OBJECT
    from server.structured.grammar_cache import GrammarCache, tokenizer_info_from_hf

    cache = GrammarCache(lambda: tokenizer_info_from_hf(transformers.AutoTokenizer.from_pretrained(str(hf_model_dir))))
    with inline(), pytest.raises(OffLoop):
        cache.compile(JSON_OBJECT)  # a miss: it would compile on the loop
    assert len(cache) == 0  # nothing started
    assert cache.compile(JSON_OBJECT).ok  # off the loop: compiled
    with inline():
        assert cache.compile(JSON_OBJECT).cached  # a hit stays on the loop


def test_a_request_plans_off_the_loop_until_its_schema_is_known(make_app, monkeypatch) -> None:
    import server.api.routes._plan as where

    hops: list[str] = []
    real = asyncio.to_thread

    async def counted(fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        hops.append(fn.func.__name__)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(where.asyncio, "to_thread", counted)
    client = make_app(script=lambda req: ['{"a": 1}'], max_model_len=1 << 17).client()
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "loop_budget_test": {"type": "string"}},
              "required": ["a"]}
    body = {"messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}
    for _ in range(2):
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == '{"a": 1}'
    assert hops == ["build_plan"]  # the first: a new schema (analysed and compiled in a thread); the second: on the loop
    big = {**body, "messages": [{"role": "user", "content": "x" * (INLINE_MAX_BODY_BYTES + 1)}]}
    assert client.post("/v1/chat/completions", json=big).status_code == 200
    assert hops == ["build_plan"] * 2  # a large body always plans in a thread
