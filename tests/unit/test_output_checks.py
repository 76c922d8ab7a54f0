"""server/chat/output_checks.py: the per-choice finishing step is the same streamed or not: JSON validated, outcome reported."""
from __future__ import annotations

import json
from typing import Any

import pytest

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
RF = {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}
USER = [{"role": "user", "content": "hi"}]


def _finish_chunks(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if line.startswith("data: {"):
            for ch in json.loads(line[6:]).get("choices") or []:
                if ch.get("finish_reason"):
                    out.append(ch)
    return out


@pytest.mark.parametrize("output,outcome", [('{"a": 1}', "valid"), ('{"a": "x"}', "invalid")])
def test_streamed_json_is_validated_and_reported_in_the_finish_chunk(make_app: Any, output: str, outcome: str) -> None:
    b = make_app(script=lambda req: [output])
    r = b.client().post("/v1/chat/completions", json={"messages": USER, "max_tokens": 50, "stream": True,
                                                      "response_format": RF})
    finals = _finish_chunks(r.text)
    assert len(finals) == 1 and finals[0]["schema_validated"] == outcome


def test_streamed_length_cut_is_skipped(make_app: Any) -> None:
    b = make_app(script=lambda req: ['{"a": 1', "2345}"])
    r = b.client().post("/v1/chat/completions", json={"messages": USER, "max_tokens": 4, "stream": True,
                                                      "response_format": RF})
    assert _finish_chunks(r.text)[0]["schema_validated"] == "skipped_length"


def test_every_choice_is_reported_not_only_the_last(make_app: Any) -> None:
    b = make_app(script=lambda req: ['{"a": 1}'])  # the fake engine gives each choice the same text
    r = b.client().post("/v1/chat/completions", json={"messages": USER, "max_tokens": 50, "n": 2,
                                                      "response_format": RF})
    body = r.json()
    assert [c["schema_validated"] for c in body["choices"]] == ["valid", "valid"]
    assert r.headers["x-gramserve-schema-validated"] == "valid,valid"
    s = b.client().post("/v1/chat/completions", json={"messages": USER, "max_tokens": 50, "n": 2, "stream": True,
                                                      "response_format": RF})
    assert sorted(c["index"] for c in _finish_chunks(s.text) if c["schema_validated"] == "valid") == [0, 1]


def test_plain_requests_carry_no_outcome(make_app: Any) -> None:
    b = make_app()
    r = b.client().post("/v1/chat/completions", json={"messages": USER, "max_tokens": 5})
    assert "schema_validated" not in r.json()["choices"][0] and "x-gramserve-schema-validated" not in r.headers


def test_a_json_answer_is_checked_without_serialising_its_memoized_schema_again(make_app: Any,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from server.chat import output_checks

    dumps: list[int] = []
    real = output_checks.schema_validator
    monkeypatch.setattr(output_checks, "schema_validator", lambda schema: dumps.append(1) or real(schema))
    b = make_app(script=lambda req: ['{"a": 1}'])
    for _ in range(3):
        r = b.client().post("/v1/chat/completions", json={"messages": USER, "max_tokens": 50, "response_format": RF})
        assert r.json()["choices"][0]["message"]["content"] == '{"a": 1}'
    assert len(dumps) == 1  # the first request found no validator for the memo's schema object; the others did
    other = {**SCHEMA, "required": []}
    r = b.client().post("/v1/chat/completions", json={"messages": USER, "max_tokens": 50, "response_format": {
        "type": "json_schema", "json_schema": {"name": "p", "schema": other}}})
    assert r.status_code == 200 and len(dumps) == 2  # another format: its own validator


def test_the_shared_validator_is_found_by_identity_only() -> None:
    from server.chat.output_checks import shared_schema_validator

    a = {"type": "object", "required": ["x"]}
    b = json.loads(json.dumps(a))  # equal, not the same object
    va = shared_schema_validator(a)
    assert shared_schema_validator(a) is va
    assert not va.is_valid({}) and va.is_valid({"x": 1})
    assert shared_schema_validator(b).is_valid({"x": 1}) and not shared_schema_validator(b).is_valid({})
