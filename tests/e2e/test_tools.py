"""End-to-end tool calling: the OpenAI SDK against the real server (SmolLM2, hermes format).

What is checked is what the grammar and the response rules guarantee, not what the
135M model would choose: ``required`` / named calls always exist and fit their schema,
``none`` never calls, ``parallel_tool_calls: false`` gives one call, ``finish_reason`` is
``tool_calls`` exactly when calls are returned, ids are unique ``call_...``, streaming
reconstructs the same calls, and 40 BFCL questions under ``required`` / named give
schema-valid arguments on every call. Independent requests run concurrently.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from jsonschema import Draft202012Validator

from tests.sse_validator import validate_sse

from .conftest import TESTDATA

pytestmark = pytest.mark.e2e

MAX_TOKENS = 200
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the current UTC time.", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, TIME]
# get_weather with arguments of bounded length (<= 40 + 10 characters of values), for tests that
# need the call to end before max_tokens whatever the model writes.
BOUNDED_WEATHER = {"type": "function", "function": {
    **WEATHER["function"], "parameters": {**WEATHER["function"]["parameters"], "additionalProperties": False,
                                          "properties": {**WEATHER["function"]["parameters"]["properties"],
                                                         "city": {"type": "string", "maxLength": 40}}}}}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOL_MARKERS = ("<tool_call>", "</tool_call>")


def named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def after_tool_result(*, choice: str) -> dict[str, Any]:
    """A second turn: the assistant's call and the tool's result are in the history."""
    return {"messages": PARIS + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_abc123", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_abc123", "content": '{"temperature": 18, "sky": "sunny"}'},
    ], "tools": TOOLS, "tool_choice": choice}


CASES: dict[str, dict[str, Any]] = {
    "auto": {"messages": PARIS, "tools": TOOLS},
    "required": {"messages": PARIS, "tools": TOOLS, "tool_choice": "required"},
    # named wins over what the question asks for
    "named": {"messages": [{"role": "user", "content": "What time is it?"}], "tools": TOOLS,
              "tool_choice": named("get_weather")},
    "no_params": {"messages": [{"role": "user", "content": "What time is it?"}], "tools": TOOLS,
                  "tool_choice": named("get_time")},
    "none": {"messages": PARIS, "tools": TOOLS, "tool_choice": "none"},
    "parallel_false": {"messages": [{"role": "user", "content": "What is the weather in Paris, in Tokyo and in Rome?"}],
                       "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False},
    "utf8": {"messages": [{"role": "user", "content": "Quel temps fait-il à Zürich ?"}], "tools": [WEATHER],
             "tool_choice": named("get_weather")},
    "multi_turn_auto": after_tool_result(choice="auto"),
    "multi_turn_none": after_tool_result(choice="none"),
}


@pytest.fixture(scope="module")
def answers(client, model) -> dict[str, Any]:
    """Every case in CASES, answered once, concurrently (temperature 0)."""
    def ask(kw: dict[str, Any]) -> Any:
        return client.chat.completions.create(model=model, temperature=0, max_tokens=MAX_TOKENS, **kw)

    with ThreadPoolExecutor(8) as pool:
        return dict(zip(CASES, pool.map(ask, CASES.values())))


def _check_calls(choice: Any) -> list[tuple[str, dict[str, Any]]]:
    """The response rules every choice follows; returns (name, parsed arguments) per call."""
    calls = choice.message.tool_calls or []
    if calls:
        assert choice.finish_reason in ("tool_calls", "length"), choice
    else:
        assert choice.finish_reason != "tool_calls", choice
    out = []
    for tc in calls:
        assert tc.type == "function" and tc.id.startswith("call_"), tc
        assert isinstance(tc.function.arguments, str) and tc.function.arguments.strip(), tc
        args = json.loads(tc.function.arguments)
        Draft202012Validator(SCHEMAS[tc.function.name]).validate(args)
        out.append((tc.function.name, args))
    assert len({tc.id for tc in calls}) == len(calls), "tool call ids must be unique"
    if not calls or choice.message.content is not None:
        assert not any(m in (choice.message.content or "") for m in TOOL_MARKERS), choice.message.content
    return out


def test_required_gives_schema_valid_calls(answers):
    choice = answers["required"].choices[0]
    calls = _check_calls(choice)
    assert calls and choice.finish_reason == "tool_calls"
    assert choice.message.content is None  # nothing before the calls under required


def test_named_gives_exactly_that_function(answers):
    choice = answers["named"].choices[0]
    calls = _check_calls(choice)
    assert [name for name, _ in calls] == ["get_weather"]
    assert choice.finish_reason == "tool_calls"


def test_parameterless_tool_arguments_are_empty_object(answers):
    choice = answers["no_params"].choices[0]
    calls = _check_calls(choice)
    assert calls == [("get_time", {})]  # a JSON string that decodes to {}: never "", null or missing


def test_parameterless_tool_arguments_are_literally_empty_braces(answers):
    assert answers["no_params"].choices[0].message.tool_calls[0].function.arguments == "{}"


def test_none_never_calls(answers):
    choice = answers["none"].choices[0]
    assert _check_calls(choice) == []
    assert choice.message.tool_calls is None and choice.message.content
    assert choice.finish_reason in ("stop", "length")


def test_auto_follows_the_response_rules(answers):
    _check_calls(answers["auto"].choices[0])  # SmolLM2 mostly answers in prose here; either way the rules hold


def test_parallel_tool_calls_false_gives_one_call(answers):
    choice = answers["parallel_false"].choices[0]
    assert len(_check_calls(choice)) == 1
    assert choice.finish_reason == "tool_calls"


def test_non_ascii_arguments_stay_utf8(answers):
    tc = answers["utf8"].choices[0].message.tool_calls[0]
    assert "\\u" not in tc.function.arguments, tc.function.arguments
    assert any(ord(ch) > 127 for ch in tc.function.arguments), tc.function.arguments
    assert any(ord(ch) > 127 for ch in json.loads(tc.function.arguments)["city"])


def test_multi_turn_with_tool_results(answers):
    final = answers["multi_turn_none"].choices[0]
    assert _check_calls(final) == [] and final.message.content.strip()
    assert final.finish_reason in ("stop", "length")
    _check_calls(answers["multi_turn_auto"].choices[0])


def test_call_ids_unique_across_responses(answers):
    ids = [tc.id for r in answers.values() for tc in (r.choices[0].message.tool_calls or [])]
    assert len(ids) >= 4 and len(set(ids)) == len(ids)


# ---------------------------------------------------------------- streaming

STREAMED = ["required", "named", "no_params", "utf8", "parallel_false"]
# A call whose whole text the grammar fixes (one allowed value, one call): the only kind of
# request whose streamed and non-streamed answers must be equal across two requests, whose
# batches differ.
SET_UNIT = {"type": "function", "function": {
    "name": "set_unit", "description": "Set the temperature unit.",
    "parameters": {"type": "object", "properties": {"unit": {"type": "string", "enum": ["celsius"]}},
                   "required": ["unit"], "additionalProperties": False}}}
FIXED_CASES = {
    "fixed_args": {"messages": PARIS, "tools": [SET_UNIT, WEATHER], "tool_choice": named("set_unit"),
                   "parallel_tool_calls": False},
    "no_params": {**CASES["no_params"], "parallel_tool_calls": False},
}


def _streamed_calls(rec: Any) -> list[tuple[str, str, str]]:
    """(id, name, arguments text) per streamed call, in index order (indices 0..n-1)."""
    streamed = rec.tool_calls.get(0, {})
    assert sorted(streamed) == list(range(len(streamed)))
    return [(streamed[k]["id"], streamed[k]["name"], streamed[k]["arguments"]) for k in sorted(streamed)]


def test_stream_obeys_the_call_rules(http, model):
    """Each streamed answer on its own: calls that fit their schema, ids, finish reason, no text."""
    def stream(case: str) -> Any:
        body = {"model": model, "temperature": 0, "max_tokens": MAX_TOKENS, "stream": True, **CASES[case]}
        raw = http.post("/v1/chat/completions", json=body)
        assert raw.status_code == 200, raw.text
        return validate_sse(raw.text, n=1)

    with ThreadPoolExecutor(8) as pool:
        results = dict(zip(STREAMED, pool.map(stream, STREAMED)))
    for case, rec in results.items():
        calls = _streamed_calls(rec)
        assert calls, case
        allowed = {"named": {"get_weather"}, "utf8": {"get_weather"}, "no_params": {"get_time"}}.get(case, set(SCHEMAS))
        for call_id, name, arguments in calls:
            assert call_id.startswith("call_") and name in allowed, (case, name)
            Draft202012Validator(SCHEMAS[name]).validate(json.loads(arguments))
        assert len({c[0] for c in calls}) == len(calls), case
        if case == "parallel_false":
            assert len(calls) == 1
        assert rec.finish_reason[0] == "tool_calls", case
        assert not rec.content.get(0), case  # nothing but calls under required / named


@pytest.mark.parametrize("case", sorted(FIXED_CASES))
def test_stream_equals_non_stream_where_the_grammar_fixes_the_call(http, model, case):
    body = {"model": model, "temperature": 0, "max_tokens": MAX_TOKENS, **FIXED_CASES[case]}
    plain = http.post("/v1/chat/completions", json=body)
    raw = http.post("/v1/chat/completions", json={**body, "stream": True})
    assert plain.status_code == 200 and raw.status_code == 200, (plain.text, raw.text)
    choice = plain.json()["choices"][0]
    want = [(tc["function"]["name"], tc["function"]["arguments"]) for tc in choice["message"]["tool_calls"]]
    got = [(name, arguments) for _, name, arguments in _streamed_calls(validate_sse(raw.text, n=1))]
    assert got == want and len(want) == 1, case
    assert json.loads(want[0][1]) == ({"unit": "celsius"} if case == "fixed_args" else {})
    assert choice["finish_reason"] == "tool_calls"


def test_sdk_stream_accumulates_tool_calls(client, model):
    """The documented client loop: accumulate ``delta.tool_calls`` by index."""
    stream = client.chat.completions.create(model=model, temperature=0, max_tokens=MAX_TOKENS, stream=True,
                                            **CASES["named"])
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for tc in chunk.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += tc.id or ""
            entry["name"] += (tc.function and tc.function.name) or ""
            entry["arguments"] += (tc.function and tc.function.arguments) or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert [c["name"] for c in calls.values()] == ["get_weather"]
    Draft202012Validator(SCHEMAS["get_weather"]).validate(json.loads(calls[0]["arguments"]))


# ---------------------------------------------------------------- errors (no generation)

def test_tool_choice_errors_name_the_problem(http, model):
    def post(**kw: Any) -> httpx.Response:
        return http.post("/v1/chat/completions", json={"model": model, "messages": PARIS, "max_tokens": 5, **kw})

    unknown = post(tools=TOOLS, tool_choice=named("get_stock_price"))
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "tool_choice"
    assert "get_stock_price" in unknown.json()["error"]["message"]
    no_tools = post(tool_choice="required")
    assert no_tools.status_code == 400 and no_tools.json()["error"]["param"] == "tool_choice"


# ---------------------------------------------------------------- BFCL sample, required / named

BFCL_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple")
PER_CATEGORY = 10  # a bounded sample (40 questions) keeps make test inside its time; GRAMSERVE_TESTDATA for more
BFCL_MAX_TOKENS = 512  # room for three calls as SmolLM2 writes them; a cut answer is counted
FINISHED_SHARE = 0.9  # measured 62/64 (issue 11's goal: 95%); the floor leaves room for numeric drift
CONCURRENCY = 16


def _bfcl_sample() -> list[tuple[str, dict[str, Any]]]:
    """Evenly spaced lines of each category file: deterministic, not just the first few."""
    out = []
    for cat in BFCL_CATEGORIES:
        lines = (TESTDATA / "bfcl" / f"{cat}.jsonl").read_text(encoding="utf-8").splitlines()
        step = max(1, len(lines) // PER_CATEGORY)
        out += [(cat, json.loads(line)) for line in lines[::step][:PER_CATEGORY]]
    return out


def _ask_bfcl(client: Any, model: str, k: int, cat: str, q: dict[str, Any]) -> dict[str, Any]:
    """Even k: tool_choice required; odd k: named (the first ground-truth function)."""
    single = cat in ("simple_python", "multiple")
    if k % 2 == 0:
        choice: Any = "required"
    else:
        reverse = {v: s for s, v in q["name_map"].items()}
        choice = named(reverse[next(iter(q["ground_truth"][0]))])
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in q["tools"]}
    try:
        r = client.chat.completions.create(model=model, messages=q["messages"], tools=q["tools"], tool_choice=choice,
                                           parallel_tool_calls=not single, temperature=0,
                                           max_tokens=BFCL_MAX_TOKENS)
    except openai.BadRequestError as e:
        return {"id": q["id"], "rejected": e.body}
    ch = r.choices[0]
    calls = ch.message.tool_calls or []
    if ch.finish_reason == "length" and calls and not _parses(calls[-1].function.arguments):
        calls = calls[:-1]  # the call max_tokens cut, returned as far as it was written (the unfinished-call rule)
    invalid = []
    for tc in calls:
        if isinstance(choice, dict) and tc.function.name != choice["function"]["name"]:
            invalid.append(f"{tc.function.name}: not the named function")
            continue
        errs = list(Draft202012Validator(schemas[tc.function.name], format_checker=Draft202012Validator.FORMAT_CHECKER)
                    .iter_errors(json.loads(tc.function.arguments)))
        invalid += [f"{tc.function.name}: {e.message}" for e in errs]
    seen = [(tc.function.name, json.loads(tc.function.arguments)) for tc in calls]
    repeats = sum(1 for i, c in enumerate(seen) if c in seen[:i])
    return {"id": q["id"], "calls": len(calls), "invalid": invalid, "finish": ch.finish_reason, "repeats": repeats,
            "named": isinstance(choice, dict), "single": single}


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_bfcl_required_and_named_calls_fit_their_schema(client, model, http):
    sample = _bfcl_sample()
    assert len(sample) >= 4 * PER_CATEGORY
    guard_before = _tool_call_outcomes(http, "duplicate")
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        results = list(pool.map(lambda a: _ask_bfcl(client, model, a[0], *a[1]), enumerate(sample)))
    guarded = _tool_call_outcomes(http, "duplicate") - guard_before
    rejected = [r for r in results if "rejected" in r]
    answered = [r for r in results if "rejected" not in r]
    calls = sum(r["calls"] for r in answered)
    invalid = [(r["id"], r["invalid"]) for r in answered if r["invalid"]]
    truncated = [r["id"] for r in answered if r["finish"] == "length"]
    print(f"\n[bfcl required/named] questions {len(sample)}, answered {len(answered)}, rejected (400) {len(rejected)}, "
          f"calls {calls}, schema-valid {calls - sum(len(i) for _, i in invalid)}, truncated by max_tokens "
          f"{len(truncated)} {truncated}, finish_reason tool_calls {sum(r.get('finish') == 'tool_calls' for r in answered)}"
          f"/{len(answered)}, turns ended by the repeat guard {guarded:.0f}")
    assert not [r["id"] for r in answered if r["repeats"]], "no answer holds two identical calls"
    finished = sum(r["finish"] == "tool_calls" for r in answered) / len(answered)
    assert finished >= FINISHED_SHARE, f"only {finished:.0%} of answers ended with their calls: {truncated}"
    for r in rejected:
        print(f"  400 {r['id']}: {r['rejected']}")
        assert r["rejected"]["message"] and (r["rejected"].get("param") or "").startswith(("tools", "tool_choice"))
    assert not invalid, invalid
    # at most one in ten refused (a schema the grammar cannot enforce exactly is a 400, by design)
    assert len(answered) >= 0.9 * len(sample), f"only {len(answered)} of {len(sample)} answered; {len(rejected)} rejected"
    for r in answered:
        if r["finish"] != "length":  # a call was forced, so there is one (or, for named / single, exactly one)
            assert r["finish"] == "tool_calls" and r["calls"] >= 1, r
            if r["named"] or r["single"]:
                assert r["calls"] == 1, r


def test_a_looping_argument_is_closed_and_the_call_returned(client, model):
    """SmolLM2 writes ``"coord1": [1.0, 1.0, ...`` without end for this question; the engine's loop
    breaker closes the array after the repeats it saw, so the call comes back whole (streamed
    and not) instead of a turn cut by max_tokens with no call."""
    line = next((line for line in (TESTDATA / "bfcl" / "simple_python.jsonl").read_text().splitlines()
                 if '"simple_python_83"' in line), None)
    if line is None:
        pytest.skip("this test data sample has no simple_python_83 (the question SmolLM2 loops on)")
    q = json.loads(line)
    kwargs = dict(model=model, messages=q["messages"], tools=q["tools"], temperature=0, max_tokens=512,
                  tool_choice=named("calculate_distance"))
    r = client.chat.completions.create(**kwargs)
    assert r.choices[0].finish_reason == "tool_calls", r.choices[0]
    (call,) = r.choices[0].message.tool_calls
    args = json.loads(call.function.arguments)
    Draft202012Validator(q["tools"][0]["function"]["parameters"]).validate(args)
    looped = [v for v in args.values() if isinstance(v, list) and len(v) >= 16 and len(set(v)) == 1]
    assert looped, args  # the loop is what was shortened: its repeats stay, nothing is made up
    arguments = ""
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            arguments += (tc.function and tc.function.arguments) or ""
        if chunk.choices and chunk.choices[0].finish_reason:
            assert chunk.choices[0].finish_reason == "tool_calls"
    assert json.loads(arguments) == args


# ---------------------------------------------------------------- metrics

def _tool_call_outcomes(http: httpx.Client, outcome: str) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith('gramserve_tool_calls_total{') and f'outcome="{outcome}"' in line:
            return float(line.split()[-1])
    return 0.0


def _valid_calls(http: httpx.Client) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith('gramserve_tool_calls_total{') and 'parser="hermes"' in line and 'outcome="valid"' in line:
            return float(line.split()[-1])
    return 0.0


def test_metrics_count_valid_tool_calls(http, client, model):
    before = _valid_calls(http)
    r = client.chat.completions.create(model=model, temperature=0, max_tokens=MAX_TOKENS, **CASES["named"])
    assert len(r.choices[0].message.tool_calls) == 1
    assert _valid_calls(http) >= before + 1


def test_forced_call_with_response_format_is_served(client, model):
    """OpenAI accepts tool_choice required / named with response_format: the turn is the call."""
    rf = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
        "additionalProperties": False}}}
    for choice in ("required", named("get_weather")):
        # bounded arguments and one call: the grammar ends the turn well inside max_tokens
        r = client.chat.completions.create(model=model, messages=PARIS, tools=[BOUNDED_WEATHER], tool_choice=choice,
                                           response_format=rf, parallel_tool_calls=False, temperature=0,
                                           max_tokens=MAX_TOKENS)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls" and len(ch.message.tool_calls) == 1, ch
        for tc in ch.message.tool_calls:
            assert tc.function.name == "get_weather"
            Draft202012Validator(BOUNDED_WEATHER["function"]["parameters"]).validate(json.loads(tc.function.arguments))


def test_legacy_functions_api(client, model):
    """The deprecated functions / function_call fields are served in their own shape, enforced."""
    fn = BOUNDED_WEATHER["function"]  # bounded arguments: the call ends well inside max_tokens
    r = client.chat.completions.create(model=model, messages=PARIS, functions=[fn],
                                       function_call={"name": fn["name"]}, temperature=0, max_tokens=MAX_TOKENS)
    ch = r.choices[0]
    assert ch.finish_reason == "function_call" and ch.message.function_call.name == fn["name"], ch
    Draft202012Validator(fn["parameters"]).validate(json.loads(ch.message.function_call.arguments))
    assert not ch.message.tool_calls


def test_a_strict_tool_the_grammar_cannot_enforce_exactly_is_a_400(client, model):
    """``strict: true`` on a function (the default of openai-agents' function tools) promises
    arguments that always fit: a schema the tool-call grammar enforces loosely is refused up front,
    as OpenAI refuses it; the same tool without ``strict`` is served and its calls checked afterwards."""
    params = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3,
                                                         "uniqueItems": True}},
              "required": ["tags"], "additionalProperties": False}
    tool = {"type": "function", "function": {"name": "tag", "parameters": params, "strict": True}}
    messages = [{"role": "user", "content": "Tag this post about cats."}]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=messages, tools=[tool], tool_choice="required", max_tokens=64)
    err = e.value.body
    assert err["param"] == "tools[0].function.parameters" and err["code"] == "unsupported_schema", err
    assert "uniqueItems at /properties/tags" in err["message"] and "'tag'" in err["message"], err
    loose = {"type": "function", "function": {"name": "tag", "parameters": params}}
    r = client.chat.completions.create(model=model, messages=messages, tools=[loose], tool_choice="required",
                                       max_tokens=64, temperature=0)
    assert r.choices[0].message.tool_calls[0].function.name == "tag"
