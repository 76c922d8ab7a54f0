"""End-to-end structured output: every constrained answer fits, or the server said 400.

40+ real schemas from JSONSchemaBench (both subsets), sent concurrently. Each output
must validate with jsonschema (Draft 2020-12, format checker) unless it ended with
finish_reason "length"; otherwise the server must have rejected the schema with a 400
that names the problem. The counts are printed.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field

from .conftest import TESTDATA

pytestmark = pytest.mark.e2e

PER_SUBSET = 3  # evenly spaced files from every subset: 13 subsets -> 39 schemas (bounded for make test)
# Enough for the JSON of most sample schemas; a longer answer ends with "length" and is counted,
# not judged. Requests go out together so the engine batches them.
MAX_TOKENS = 256
CONCURRENCY = 16


def _sample() -> list[tuple[str, dict]]:
    out = []
    for subset in sorted(p for p in (TESTDATA / "jsonschemabench").iterdir() if p.is_dir()):
        files = sorted(subset.glob("*.json"))
        step = max(1, len(files) // PER_SUBSET)
        for f in files[::step][:PER_SUBSET]:
            out.append((f"{subset.name}/{f.stem}", json.loads(f.read_text())["schema"]))
    return out


def test_jsonschemabench_outputs_validate(client, model):
    sample = _sample()
    assert len(sample) >= 30

    def run(item):
        name, schema = item
        try:
            r = client.chat.completions.create(
                model=model, temperature=0, max_tokens=MAX_TOKENS,
                # As in JSONSchemaBench, the prompt shows the schema; the grammar enforces it.
                messages=[{"role": "user", "content": "Produce a JSON object matching this JSON Schema:\n"
                           + json.dumps(schema)[:2000]}],
                response_format={"type": "json_schema", "json_schema": {"name": "out", "schema": schema, "strict": True}},
            )
        except openai.BadRequestError as e:
            return name, "rejected", e.body.get("message", "")
        choice = r.choices[0]
        if choice.finish_reason == "length":
            return name, "length", ""
        value = json.loads(choice.message.content)
        errors = list(Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER).iter_errors(value))
        return name, "valid" if not errors else "invalid", "; ".join(e.message for e in errors[:2])

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        results = list(pool.map(run, sample))
    counts: dict[str, int] = {}
    per_subset: dict[str, dict[str, int]] = {}
    for name, outcome, _ in results:
        counts[outcome] = counts.get(outcome, 0) + 1
        sub = per_subset.setdefault(name.split("/")[0], {})
        sub[outcome] = sub.get(outcome, 0) + 1
    print(f"\n[structured-output e2e] {len(results)} schemas: {counts}")
    for subset, c in per_subset.items():
        print(f"  {subset}: {c}")
    for name, outcome, detail in results:
        if outcome != "valid":
            print(f"  {name}: {outcome} {detail[:200]}")
    invalid = [(n, d) for n, o, d in results if o == "invalid"]
    assert not invalid, invalid
    for name, outcome, detail in results:
        if outcome == "rejected":
            assert detail and ("/" in detail or "schema" in detail.lower()), (name, detail)
    assert counts.get("valid", 0) >= 10, counts  # the constrained model does finish most answers


class City(BaseModel):
    name: str
    country: str
    population: int


def test_sdk_parse_with_pydantic(client, model):
    r = client.chat.completions.parse(model=model, temperature=0, max_tokens=200, response_format=City,
                                      messages=[{"role": "user", "content": "Describe Paris as a JSON object with its name, country "
                                                                          "and population (an integer)."}])
    city = r.choices[0].message.parsed
    assert isinstance(city, City)


def test_json_object_mode(client, model):
    r = client.chat.completions.create(model=model, temperature=0, max_tokens=200,
                                       response_format={"type": "json_object"},
                                       messages=[{"role": "user", "content": "Give me a JSON object about a cat."}])
    choice = r.choices[0]
    if choice.finish_reason == "stop":
        assert isinstance(json.loads(choice.message.content), dict)
    else:  # json_object bounds no length: an object may run out, but what came is a JSON object's prefix
        import partial_json_parser

        assert choice.finish_reason == "length" and r.usage.completion_tokens == 200
        assert isinstance(partial_json_parser.loads(choice.message.content), dict), choice.message.content


def test_structured_outputs_extras(client, model):
    def ask(so, content="Answer."):
        return client.chat.completions.create(model=model, temperature=0, max_tokens=60,
                                              messages=[{"role": "user", "content": content}],
                                              extra_body={"structured_outputs": so}).choices[0]
    c = ask({"choice": ["red", "green", "blue"]}, "Pick a color.")
    assert c.message.content in ("red", "green", "blue")
    c = ask({"regex": r"[0-9]{3}-[0-9]{4}"}, "Give a phone number.")
    import re

    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", c.message.content)
    c = ask({"grammar": 'root ::= "yes" | "no"'}, "Is the sky blue?")
    assert c.message.content in ("yes", "no")
    # bounded: at most {"n":999}, so it ends well inside max_tokens
    c = ask({"json": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 999}},
                      "required": ["n"], "additionalProperties": False}}, "A number.")
    assert c.finish_reason == "stop", c
    assert 0 <= json.loads(c.message.content)["n"] <= 999


@pytest.mark.parametrize("so,needle", [
    ({"regex": "[0-9"}, "regex"),
    ({"grammar": "root ::= ("}, "grammar"),
    ({"choice": []}, "choice"),
    ({"json": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}, "schema"),
])
def test_bad_constraints_fail_closed(client, model, so, needle):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, max_tokens=5, messages=[{"role": "user", "content": "x"}],
                                       extra_body={"structured_outputs": so})
    assert needle in e.value.body["message"].lower()


def test_invalid_response_format_schema_is_400(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=model, max_tokens=5, messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 12}}})
    assert e.value.body["param"].startswith("response_format")


# Each needs a compiler of its own: XGrammar (closed object), llguidance (allOf of two objects, an open
# object whose other properties may hold any value, an exact `not` rewrite), on the one engine.
BACKEND_SCHEMAS = {
    "xgrammar": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3, "maximum": 7}},
                 "required": ["n"], "additionalProperties": False},
    "llguidance_allof": {"allOf": [{"type": "object", "properties": {"n": {"type": "integer", "minimum": 3, "maximum": 7}},
                                    "required": ["n"]},
                                   {"properties": {"c": {"enum": ["red", "blue"]}}, "required": ["c"]}]},
    "llguidance_not": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3, "maximum": 7},
                                                         "x": {"not": {}}},
                       "required": ["n"], "maxProperties": 2},
}


@pytest.mark.parametrize("name", sorted(BACKEND_SCHEMAS))
@pytest.mark.parametrize("stream", [False, True])
def test_each_backend_enforces_its_schemas_through_the_engine(client, http, model, name, stream):
    """The engine's hybrid backend runs the backend the schema check names; every answer fits."""
    schema = BACKEND_SCHEMAS[name]
    check = http.post("/v1/schemas/check", json={"schema": schema}).json()
    assert check["items"][0]["backend"] == name.split("_")[0] and check["items"][0]["strict_ok"], check
    for seed in range(3):
        kw = dict(model=model, temperature=1.0, seed=seed, max_tokens=120,
                  messages=[{"role": "user", "content": "Write a small JSON object."}],
                  response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}})
        if stream:
            chunks = list(client.chat.completions.create(stream=True, **kw))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = next(c.choices[0].finish_reason for c in reversed(chunks) if c.choices and c.choices[0].finish_reason)
        else:
            r = client.chat.completions.create(**kw)
            text, finish = r.choices[0].message.content, r.choices[0].finish_reason
        if finish == "length":
            continue  # an open object may run on; what came is never judged
        value = json.loads(text)
        errors = [e.message for e in Draft202012Validator(schema).iter_errors(value)]
        assert not errors, (name, text, errors)


class Note(BaseModel):
    title: str = Field(min_length=1, max_length=12)
    body: str = Field(max_length=24)


def test_a_length_bounded_string_never_holds_a_raw_control_character(client, model):
    """A model that wants a tab inside a bounded string (logit_bias pushes SmolLM2's tab token) still
    gets JSON the SDK parses: XGrammar's own grammar for such a string let raw tabs in
    (server/engine/xgrammar_json.py), in a response format and in a tool call's arguments."""
    import transformers

    from server.default_model import ensure_default_model

    tok = transformers.AutoTokenizer.from_pretrained(str(ensure_default_model(progress=False)))
    tab = tok.convert_tokens_to_ids("ĉ")
    assert tok.decode([tab]) == "\t"
    bias = {str(tab): 100}
    messages = [{"role": "user", "content": "Write a short note about tabs and spaces."}]
    parsed = client.beta.chat.completions.parse(model=model, messages=messages, temperature=0, max_tokens=96,
                                                logit_bias=bias, response_format=Note)
    note = parsed.choices[0].message.parsed  # the SDK's pydantic parse: a raw tab would fail it
    assert note is not None and 1 <= len(note.title) <= 12 and len(note.body) <= 24
    assert "\t" not in parsed.choices[0].message.content
    tool = {"type": "function", "function": {"name": "save_note", "parameters": Note.model_json_schema()}}
    r = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=128,
                                       logit_bias=bias, tools=[tool], tool_choice="required")
    call = r.choices[0].message.tool_calls[0]
    Note.model_validate_json(call.function.arguments)  # strict JSON: no raw control character in a string


def _outside_strings(text: str) -> str:
    """``text``'s characters outside JSON strings (a prefix of JSON will do)."""
    out, inside, escaped = [], False, False
    for ch in text:
        if inside:
            escaped, inside = (not escaped and ch == "\\"), inside and (escaped or ch != '"')
        elif ch == '"':
            inside = True
        else:
            out.append(ch)
    return "".join(out)


@pytest.mark.parametrize("fmt", ["json_object", "any_items"])
def test_an_any_value_is_written_compact_as_the_rest(client, model, fmt):
    """The engine writes JSON without whitespace (vLLM's disable_any_whitespace); XGrammar 0.2.8 still
    forced ", " between the members and items of a value that may be any JSON (``json_object``, an
    array without ``items``): mlc-ai/xgrammar#945, fixed in server/engine/xgrammar_json.py."""
    schema = {"type": "object", "properties": {"facts": {"type": "array", "maxItems": 6}}, "required": ["facts"],
              "additionalProperties": False}
    response_format = ({"type": "json_object"} if fmt == "json_object" else
                       {"type": "json_schema", "json_schema": {"name": "facts", "schema": schema, "strict": True}})
    r = client.chat.completions.create(model=model, temperature=0, max_tokens=120, response_format=response_format,
                                       messages=[{"role": "user", "content": "Give me a JSON object of facts about a cat."}])
    text = r.choices[0].message.content
    outside = _outside_strings(text)
    assert outside.count(",") >= 1, text  # a second member or item: where the old grammar forced a blank
    assert not any(ch.isspace() for ch in outside), text
    if r.choices[0].finish_reason == "stop":
        json.loads(text)
