"""The BFCL eval's scoring on handmade questions (no server)."""
from __future__ import annotations

import json

from evals.bfcl import Call, calls_match, schema_problems, score_question, selection_correct, summarize, values_match


def _tool(name: str, props: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": name,
                                             "parameters": {"type": "object", "properties": props, "required": required}}}


SPOTIFY = _tool("spotify_play", {"artist": {"type": "string"}, "duration": {"type": "integer"}}, ["artist", "duration"])
WEATHER = _tool("get_weather", {"location": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                ["location"])
PARALLEL = {
    "id": "parallel_0", "tools": [SPOTIFY], "name_map": {"spotify_play": "spotify.play"}, "expect_no_call": False,
    "ground_truth": [{"spotify.play": {"artist": ["Taylor Swift"], "duration": [20]}},
                     {"spotify.play": {"artist": ["Maroon 5"], "duration": [15]}}],
}
SIMPLE = {
    "id": "simple_0", "tools": [WEATHER, SPOTIFY], "name_map": {"get_weather": "get_weather"}, "expect_no_call": False,
    "ground_truth": [{"get_weather": {"location": ["Paris, France", "Paris"], "unit": ["c", ""]}}],
}
IRRELEVANT = {"id": "irr_0", "tools": [WEATHER], "name_map": {}, "expect_no_call": True, "ground_truth": None}


def c(name: str, **args) -> Call:
    return Call(name, json.dumps(args))


def test_values_match_bfcl_rules():
    assert values_match("paris, france", ["Paris, France"])  # case and punctuation do not matter
    assert values_match("Paris France", ["Paris, France"])
    assert not values_match("Lyon", ["Paris"])
    assert values_match(20.0, [20]) and values_match(20, [20.0])
    assert not values_match(True, [1]) and not values_match("20", [20])
    assert not values_match("", [""])  # "" only means "may be omitted", it is not a value
    assert values_match([3, 5], [[3, 5]]) and not values_match([5, 3], [[3, 5]])
    # nested dict ground truth: key -> acceptable values, "" = optional key
    gt = [{"size": ["large"], "milk": ["oat", ""]}]
    assert values_match({"size": "Large"}, gt)
    assert values_match({"size": "large", "milk": "oat"}, gt)
    assert not values_match({"size": "large", "sugar": 2}, gt)
    assert not values_match({"milk": "oat"}, gt)


def test_simple_call_accuracy():
    assert calls_match([c("get_weather", location="Paris")], SIMPLE)
    assert calls_match([c("get_weather", location="paris, france", unit="c")], SIMPLE)
    assert not calls_match([c("get_weather", location="Paris", unit="f")], SIMPLE)  # wrong value
    assert not calls_match([c("get_weather", location="Paris", extra=1)], SIMPLE)  # extra param
    assert not calls_match([c("get_weather", unit="c")], SIMPLE)  # required param missing
    assert not calls_match([c("spotify_play", artist="Paris", duration=1)], SIMPLE)  # wrong function
    assert not calls_match([], SIMPLE)
    assert not calls_match([Call("get_weather", '{"location": "Par')], SIMPLE)  # unparsable


def test_parallel_is_order_independent_and_one_to_one():
    a = c("spotify_play", artist="Taylor Swift", duration=20)
    b = c("spotify_play", artist="Maroon 5", duration=15)
    assert calls_match([a, b], PARALLEL) and calls_match([b, a], PARALLEL)
    assert not calls_match([a, a], PARALLEL)  # one call cannot satisfy two entries
    assert not calls_match([a], PARALLEL)
    assert not calls_match([a, b, b], PARALLEL)
    assert selection_correct([a, a], PARALLEL)  # right functions, wrong arguments
    assert not selection_correct([a], PARALLEL)


def test_irrelevance_and_selection():
    assert selection_correct([], IRRELEVANT)
    assert not selection_correct([c("get_weather", location="x")], IRRELEVANT)
    r = score_question(IRRELEVANT, [], category="irrelevance")
    assert r.selection_ok and r.args_ok is None and r.n_calls == 0
    assert not selection_correct([c("spotify_play", artist="x", duration=1)], SIMPLE)


def test_schema_problems_and_summary():
    calls = [c("get_weather", location="Paris"), c("get_weather", unit="c"), Call("nope", "{}"),
             Call("get_weather", "{bad")]
    problems = schema_problems(calls, SIMPLE["tools"])
    assert len(problems) == 3
    assert problems[0].startswith("call 1 (get_weather)") and "location" in problems[0]
    assert "unknown function 'nope'" in problems[1] and "not JSON" in problems[2]
    results = [score_question(SIMPLE, calls[:1], category="simple"), score_question(SIMPLE, calls, category="simple"),
               score_question(IRRELEVANT, [], category="irrelevance")]
    s = summarize(results)
    assert s["simple"]["n"] == 2 and s["simple"]["calls"] == 5 and s["simple"]["schema_valid_calls"] == 2
    assert s["simple"]["selection_accuracy"] == 0.5 and s["simple"]["argument_accuracy"] == 0.5
    assert s["irrelevance"]["schema_valid_rate"] is None and s["irrelevance"]["argument_accuracy"] is None
    assert s["overall"]["n"] == 3 and s["overall"]["selection_accuracy"] == 2 / 3
