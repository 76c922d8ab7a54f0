"""The bytes on the wire stay put: each exchange of ``tests/data/exchanges.json`` (chat, completions
and Responses, streamed and not, tool calls in fifteen families, reasoning, JSON answers, and the
400s) is sent to the front end over the scripted FakeEngine and its status, content type and body
are compared, byte for byte, with the recording in ``tests/data/exchanges_recorded.json``.

Only what differs by nature between two runs is normalised: ids (each distinct id becomes
``<idN>`` in order of appearance, so the same id twice is still seen as the same) and times.
A redesign that changes no behaviour leaves every recording as it is. A change that means to
alter the wire rewrites them with ``GRAMSERVE_RECORD_EXCHANGES=1`` and shows the diff in review.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
INPUTS = json.loads((DATA / "exchanges.json").read_text(encoding="utf-8"))["exchanges"]
RECORDED = DATA / "exchanges_recorded.json"
RECORD = os.environ.get("GRAMSERVE_RECORD_EXCHANGES") == "1"

_ID = re.compile(r'"(id|call_id|item_id|response_id|previous_response_id|system_fingerprint)"(: ?)"([^"]*)"')
_TIME = re.compile(r'"(created|created_at|completed_at)"(: ?)[0-9.]+')


def normalise(text: str) -> str:
    """``text`` with ids numbered by first appearance and times zeroed."""
    seen: dict[str, str] = {}

    def rename(m: re.Match[str]) -> str:
        value = m.group(3)
        if value and value not in seen:
            seen[value] = f"<id{len(seen) + 1}>"
        return f'"{m.group(1)}"{m.group(2)}"{seen.get(value, value)}"'

    return _TIME.sub(lambda m: f'"{m.group(1)}"{m.group(2)}0', _ID.sub(rename, text))


def exchange(make_app: Any, ex: dict[str, Any]) -> str:
    """One exchange as text: status, content type, then the body as sent."""
    script = ex["script"]
    built = make_app(script=None if script is None else (lambda req: list(script)), tool_parser=ex["tool_parser"],
                     reasoning_parser=ex["reasoning_parser"])
    with built.client().stream("POST", ex["path"], json=ex["body"]) as r:
        body = "".join(r.iter_text())
        return f"{r.status_code} {r.headers.get('content-type')}\n{normalise(body)}"


@pytest.fixture(scope="module")
def recorded() -> Any:
    out: dict[str, str] = {} if RECORD or not RECORDED.exists() else json.loads(RECORDED.read_text(encoding="utf-8"))
    yield out
    if RECORD:
        RECORDED.write_text(json.dumps(out, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


def test_the_inputs_are_many_and_named_once() -> None:
    names = [ex["name"] for ex in INPUTS]
    assert len(names) == len(set(names)) and len(names) >= 51


@pytest.mark.parametrize("ex", INPUTS, ids=[ex["name"] for ex in INPUTS])
def test_the_exchange_is_byte_for_byte_the_recorded_one(make_app: Any, recorded: dict[str, str], ex: dict[str, Any]) -> None:
    got = exchange(make_app, ex)
    if RECORD:
        recorded[ex["name"]] = got
        return
    assert ex["name"] in recorded, f"{ex['name']} has no recording: run with GRAMSERVE_RECORD_EXCHANGES=1"
    assert got == recorded[ex["name"]]


def test_normalising_keeps_which_ids_are_the_same() -> None:
    text = '{"id": "chatcmpl-1", "created": 17, "x": {"id":"call_a"}, "y": {"id": "chatcmpl-1"}}'
    assert normalise(text) == '{"id": "<id1>", "created": 0, "x": {"id":"<id2>"}, "y": {"id": "<id1>"}}'
