"""Model families are units: a family is one module's data, and the server needs nothing else.

A tiny family, declared here the way ``tool_parsers/<family>.py`` declares one, is registered
and then works end to end with the fake engine: detection, the grammar built from its call
format, parsing, streamed and not.
"""
from __future__ import annotations

import json
from typing import Any, Iterator

import pytest

import tool_parsers
from tool_parsers import CallFormat, ModelFamily, detect_tool_parser, get_family, register_family
from tool_parsers.hermes import HermesToolParser

PIPE = CallFormat(trigger="<call>", section_begin="", call_begin='<call>{"name": "', name_end='", "arguments": ',
                  call_end="}</call>", separator="", section_end="")
FAMILY = ModelFamily(
    name="pipecall",
    parser=HermesToolParser(name="pipecall", start="<call>", end="</call>", format=PIPE),
    detect=lambda template: "<call>" in template,
    detect_order=5,
)
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
OUTPUT = 'Checking.<call>{"name": "get_weather", "arguments": {"city": "Paris"}}</call>'


@pytest.fixture
def pipecall() -> Iterator[ModelFamily]:
    register_family(FAMILY)
    try:
        yield FAMILY
    finally:
        tool_parsers._FAMILIES.pop(FAMILY.name, None)


def test_built_in_families_are_declared_by_their_modules() -> None:
    assert {"hermes", "llama3_json", "mistral", "mistral_v11", "mistral_v13"} <= set(tool_parsers.FAMILIES)
    mistral = {get_family(n).parser.format.name_end for n in ("mistral", "mistral_v11", "mistral_v13")}
    assert mistral == {'", "arguments": ', "[ARGS]"}  # one parser class, formats as data (v11 writes as v13)
    assert type(get_family("mistral_v11").parser) is type(get_family("mistral").parser)
    assert get_family("llama3_json").format.calls_follow_text is False
    with pytest.raises(ValueError, match="already registered"):
        register_family(ModelFamily(name="hermes", parser=HermesToolParser(), detect=lambda t: False))


def test_a_registered_family_is_detected(pipecall: ModelFamily) -> None:
    assert detect_tool_parser("{% for t in tools %}<call>{{ t }}</call>{% endfor %}") == "pipecall"


@pytest.mark.parametrize("stream", [False, True])
def test_a_registered_family_works_end_to_end(make_app: Any, grammar_cache: Any, pipecall: ModelFamily,
                                              stream: bool) -> None:
    built = make_app(script=lambda req: [OUTPUT[:12], OUTPUT[12:40], OUTPUT[40:]], tool_parser="pipecall")
    r = built.client().post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
        "tool_choice": "auto", "max_tokens": 200, "stream": stream})
    assert r.status_code == 200, r.text
    constraint = built.engine.requests[-1].constraint
    assert constraint.kind == "structural_tag" and "<call>" in json.dumps(constraint.value)
    assert grammar_cache.compile(constraint).ok  # the grammar came from the family's CallFormat
    if stream:
        calls: dict[int, dict[str, str]] = {}
        content = ""
        for line in r.text.splitlines():
            if line.startswith("data: {"):
                for ch in json.loads(line[6:])["choices"]:
                    content += ch["delta"].get("content") or ""
                    for tc in ch["delta"].get("tool_calls") or []:
                        entry = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
                        entry["name"] += tc["function"].get("name") or ""
                        entry["arguments"] += tc["function"].get("arguments") or ""
        got = [(c["name"], json.loads(c["arguments"])) for c in calls.values()]
    else:
        msg = r.json()["choices"][0]["message"]
        content = msg["content"]
        got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"]]
    assert got == [("get_weather", {"city": "Paris"})] and content == "Checking."
