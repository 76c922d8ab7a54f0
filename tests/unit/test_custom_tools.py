"""server/chat/custom_tools.py and custom tools over /v1/chat/completions (scripted engine)."""
from __future__ import annotations

import json

import pytest

from server.chat.custom_tools import InputStream, custom_input
from tests.unit._front import chat, events, script, stream_raw

SHELL = {"type": "custom", "custom": {"name": "shell", "description": "Run a shell command.",
                                      "format": {"type": "grammar", "grammar": {"syntax": "regex",
                                                                                "definition": r"ls( -[a-z]+)?"}}}}
CALL = ["<tool_call>\n{\"name\": \"shell\", \"argu", "ments\": {\"input\": \"ls -", "la\"}}\n</tool_call>"]


@pytest.mark.parametrize("text", ['say "hi"\n\\ done', "é \u2603 \U0001F600 tab\tend", ""])
def test_input_stream_decodes_every_split(text):
    arguments = json.dumps({"input": text})
    for cut in range(len(arguments) + 1):
        s = InputStream()
        got = s.feed(arguments[:cut]) + s.feed(arguments[cut:])
        assert got == text, cut
    assert custom_input(arguments) == text
    assert custom_input("not json") == "not json"


def test_custom_call_answered_in_the_custom_shape(make_app):
    b = make_app(script=script(CALL))
    r = chat(b.client(), tools=[SHELL], tool_choice="required")
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    [call] = msg["tool_calls"]
    assert call["type"] == "custom" and call["custom"] == {"name": "shell", "input": "ls -la"}
    assert r.json()["choices"][0]["finish_reason"] == "tool_calls"
    tool = b.engine.requests[-1]
    assert tool.constraint is not None  # the regex is enforced by the grammar


def test_custom_call_streams_its_input(make_app):
    b = make_app(script=script(CALL))
    chunks = [e for e in events(stream_raw(b.client(), tools=[SHELL], tool_choice="required")) if e != "[DONE]"]
    calls = [tc for e in chunks for ch in e["choices"] for tc in (ch["delta"].get("tool_calls") or [])]
    assert calls[0]["type"] == "custom" and calls[0]["custom"]["name"] == "shell" and calls[0]["id"]
    assert "".join(c["custom"]["input"] for c in calls) == "ls -la"
    assert all("function" not in c for c in calls)


@pytest.mark.parametrize("fmt,message", [
    ({"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: \"a\""}}, "lark"),
    ({"type": "grammar", "grammar": {"syntax": "regex", "definition": "("}}, "does not compile"),
    ({"type": "grammar", "grammar": {"syntax": "regex"}}, "definition"),
])
def test_bad_custom_formats_are_400(make_app, fmt, message):
    tool = {"type": "custom", "custom": {"name": "shell", "format": fmt}}
    r = chat(make_app().client(), tools=[tool])
    assert r.status_code == 400
    err = r.json()["error"]
    assert message in err["message"] and err["param"].startswith("tools[0]")
