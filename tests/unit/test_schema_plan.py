"""The one schema decision (``server/structured/schema_plan.py``): exact or refused, never too loose.

Each kind of too-loose enforcement seen on MaskBench has a regression case here (the schema cut
down to the keyword, an invalid instance the old strict path let through); each exact rewrite of
``schema_rewrite`` is checked against python-jsonschema; the request, the schema check and
``--precompile`` give one verdict; and a schema meant for llguidance reaches vLLM in a form
XGrammar cannot run (so it fails closed where the hybrid backend is missing).
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from evals import maskbench as mb
from server.engine.hybrid_backend import GUIDANCE_JSON_PREFIX, guidance_schema_text
from server.engine.vllm_engine import structured_outputs_params
from server.errors import APIError
from server.structured.constraints import Constraint, ConstraintError, constraint_from_request
from server.structured.from_request import build
from server.structured.schema_check import check_schema_report
from server.structured.schema_plan import decide_schema
from server.structured.schema_rewrite import rewrite_schema
from server.structured.spec import ConstraintSpec


def _strict(schema: dict[str, Any], *, guidance: bool = True) -> Constraint:
    spec = ConstraintSpec(response_format={"type": "json_schema", "json_schema": {"schema": schema, "strict": True}},
                          guidance=guidance)
    built = build(spec)
    assert built.constraint is not None
    return built.constraint


def _accepts(constraint: Constraint, value: Any) -> bool:
    """Whether the grammar writes ``value`` in some key order (both grammars fix property order)."""
    accepts = (mb._llguidance_accepts(constraint.value) if constraint.backend == "llguidance"
               else mb._xgrammar_accepts(constraint))
    orders = [value] if not isinstance(value, dict) else [dict(p) for p in itertools.permutations(value.items())]
    return any(accepts(json.dumps(v, separators=(",", ":"), ensure_ascii=False)) for v in orders)


# One case per kind of too-loose enforcement (issue 35): schema, an invalid instance, a valid one.
TOO_LOOSE_KINDS = {
    "enum_values_outside_the_sibling_type": ({"type": "object", "properties": {"k": {"type": "integer", "enum": ["a", "b"]}},
                                              "required": ["k"], "additionalProperties": False}, {"k": "a"}, None),
    "pattern_beside_format": ({"type": "object", "properties": {"d": {"type": "string", "format": "date",
                                                                      "pattern": "^2024-"}},
                               "required": ["d"], "additionalProperties": False}, {"d": "2023-01-05"}, {"d": "2024-01-05"}),
    "regex_translated_wrongly": ({"type": "object", "properties": {"f": {"type": "string", "pattern": r"^file:.+\.km[lz]$"}},
                                  "required": ["f"], "additionalProperties": False}, {"f": "file:x.txt"}, {"f": "file:x.kml"}),
    "lookahead_in_pattern_properties": ({"type": "object", "patternProperties": {"^(?!x-)[a-z]+$": {"type": "integer"}},
                                         "additionalProperties": False}, {"x-a": 1}, {"ab": 1}),
    "anyof_of_required_beside_properties": ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                                             "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
                                             "additionalProperties": False}, {}, {"b": "x"}),
    "root_required_beside_one_allof_ref": ({"$defs": {"T": {"type": "object", "properties": {"a": {"type": "integer"},
                                                                                            "b": {"type": "integer"}}}},
                                            "allOf": [{"$ref": "#/$defs/T"}], "required": ["a", "b"]},
                                           {"a": 1}, {"a": 1, "b": 2}),
    # llguidance 1.7 lets an escaped backslash through a class that excludes it (MaskBench's libman.json)
    "llguidance_escape_through_a_negated_class": ({"type": "object", "properties": {"d": {"type": "string",
                                                                                          "pattern": "^[^\\\\]+$"}},
                                                   "required": ["d"]}, {"d": "a\\b"}, {"d": "ab"}),
}


@pytest.mark.parametrize("kind", sorted(TOO_LOOSE_KINDS))
def test_each_too_loose_kind_is_enforced_exactly_or_refused(kind: str) -> None:
    schema, invalid, valid = TOO_LOOSE_KINDS[kind]
    assert not jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).is_valid(invalid)
    try:
        constraint = _strict(schema)
    except APIError as exc:  # refused: it must say which keyword, where, and what was tried
        assert "tried xgrammar, llguidance" in exc.message and " at /" in exc.message, exc.message
        return
    assert not _accepts(constraint, invalid), (kind, constraint.backend)
    if valid is not None:
        assert _accepts(constraint, valid), (kind, constraint.backend)


def test_the_backend_is_chosen_per_schema() -> None:
    closed = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}
    assert _strict(closed).backend == "xgrammar"  # exact and complete there: the engine's own backend
    open_ = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    c = _strict(open_)
    assert c.backend == "llguidance"  # other properties may hold any value: XGrammar writes them only after "a"
    assert _accepts(c, {"a": 1, "extra": [1, {"x": [2, "y"]}]}) and not _accepts(c, {"extra": 1})
    two = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer", "minimum": 3}}, "required": ["a"]},
                     {"required": ["b"], "properties": {"b": {"enum": ["x"]}}}]}
    c = _strict(two)
    assert c.backend == "llguidance" and _accepts(c, {"a": 3, "b": "x"}) and not _accepts(c, {"a": 2, "b": "x"})
    with pytest.raises(APIError, match="tried xgrammar, llguidance"):  # neither enforces uniqueItems
        _strict({"type": "array", "items": {"type": "integer"}, "uniqueItems": True})
    with pytest.raises(APIError, match="runs XGrammar only"):  # an engine without llguidance tries XGrammar alone
        _strict(two, guidance=False)


# One case per kind of valid document the chosen grammar could not write (MaskBench's dev half):
# schema, a valid instance that must be writable.
TOO_STRICT_KINDS = {
    "array_with_bounds_and_no_items": ({"type": "object", "properties": {"t": {"type": "array", "maxItems": 3}},
                                        "required": ["t"], "additionalProperties": False}, {"t": [1, "a"]}),
    "array_with_an_unknown_keyword": ({"type": "array", "_uniqueItems": True}, [2022, 2023]),
    "array_with_object_keywords": ({"type": "array", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                                   [{"b": 1}, 2]),
    "unanchored_pattern_properties": ({"type": "object", "patternProperties": {"[a-z]+": {"type": "integer"}},
                                       "additionalProperties": False}, {"Error1": 1}),
    "escape_in_a_bounded_string": ({"type": "object", "properties": {"s": {"type": "string", "maxLength": 40}},
                                    "required": ["s"], "additionalProperties": False}, {"s": 'at "x"\n\tat y'}),
    "compact_any_value": ({"type": "object", "properties": {"a": {}}, "required": ["a"], "additionalProperties": False},
                          {"a": [1, {"x": 2, "y": [3, 4]}]}),
}


@pytest.mark.parametrize("kind", sorted(TOO_STRICT_KINDS))
def test_each_too_strict_kind_is_writable_or_reported(kind: str) -> None:
    """The chosen backend writes the valid document; XGrammar alone (an engine without llguidance)
    writes it too, or the decision says where its grammar is stricter."""
    schema, valid = TOO_STRICT_KINDS[kind]
    assert jsonschema.Draft202012Validator(schema).is_valid(valid)
    c = _strict(schema)
    assert _accepts(c, valid), (kind, c.backend)
    alone = _strict(schema, guidance=False)
    assert _accepts(alone, valid) or decide_schema(schema, guidance=False).stricter, kind


def test_a_branch_that_requires_a_declared_name_keeps_the_declared_order() -> None:
    """llguidance writes properties in the order they are declared, a branch's after the node's own: a
    required name declared again in an ``anyOf`` branch (as XGrammar needs: its strict mode writes no
    undeclared name) put that name first, and ``{"date": ..., "title": ...}`` in the schema's own order
    was not writable (MaskBench's Github_easy o65451). llguidance's form leaves the names undeclared."""
    schema = {"type": "object", "required": ["date"], "anyOf": [{"required": ["title"]}, {"required": ["note"]}],
              "properties": {"date": {"type": "string"}, "note": {"type": "string"}, "title": {"type": "string"}}}
    c = _strict(schema)
    assert c.backend == "llguidance"
    accepts = mb._llguidance_accepts(c.value)
    assert accepts('{"date":"d","title":"t"}') and accepts('{"date":"d","note":"n","title":"t"}')
    assert not accepts('{"date":"d"}')  # one of the branches' names is still required
    x = decide_schema(schema).xgrammar_schema  # XGrammar's form still declares them
    assert all(b["properties"] for b in x["anyOf"])


def test_a_refusal_names_keyword_pointer_and_backends() -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}
    with pytest.raises(APIError) as info:
        _strict(schema)
    msg = info.value.message
    assert "uniqueItems at /properties/tags (xgrammar:" in msg and "uniqueItems at /properties/tags (llguidance:" in msg
    assert info.value.param == "response_format.json_schema.schema" and info.value.code == "unsupported_schema"


def test_thinking_or_tools_need_xgrammar_exact() -> None:
    """A JSON answer inside a structural tag (thinking, tools) is XGrammar's: llguidance-only schemas are refused there."""
    from server.structured.constraints import ReasoningSpec

    two = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}}, {"required": ["a"]}]}
    spec = ConstraintSpec(response_format={"type": "json_schema", "json_schema": {"schema": two, "strict": True}},
                          reasoning=ReasoningSpec())
    with pytest.raises(APIError, match="only by llguidance"):
        build(spec)
    loose = ConstraintSpec(response_format={"type": "json_schema", "json_schema": {"schema": two}}, reasoning=ReasoningSpec())
    assert build(loose).constraint.kind == "structural_tag"  # not strict: served, validated afterwards


# --- exact rewrites ----------------------------------------------------------------------------

REWRITES = [
    ({"not": {"not": {"type": "integer"}}}, [1, "a", 1.5]),
    ({"type": "object", "properties": {"x": {"not": {}}}}, [{}, {"x": 1}, {"y": 1}]),
    ({"type": "object", "not": {"required": ["a", "b"]}}, [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 2}]),
    ({"not": {"type": ["string", "null"]}}, [None, "a", 1, 2.5, [], {}]),
    ({"not": {"anyOf": [{"required": ["a"]}, {"type": "string"}]}}, ["s", {}, {"a": 1}, 3]),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
      "dependencies": {"a": ["b"], "c": {"properties": {"d": {"type": "integer"}}, "required": ["d"]}}},
     [{}, {"a": 1}, {"a": 1, "b": 2}, {"c": 1}, {"c": 1, "d": 2}, {"c": 1, "d": "x"}]),
    ({"type": "object", "dependentRequired": {"a": ["b", "c"]}}, [{"a": 1}, {"a": 1, "b": 1, "c": 1}, {"b": 1}]),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
      "items": [{"type": "integer"}, {"type": "string"}], "additionalItems": False}, [[1, "a"], [1, "a", 2], [1], ["a"]]),
    ({"type": "string", "format": "int64"}, ["12", "x"]),
    ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "minimum": 1, "exclusiveMinimum": True,
      "maximum": 5, "exclusiveMaximum": False}, [1, 1.5, 5, 6]),
    ({"oneOf": [{"type": "object", "properties": {"k": {"const": "a"}, "v": {"type": "integer"}}, "required": ["k", "v"]},
                {"type": "object", "properties": {"k": {"const": "b"}, "v": {"type": "string"}}, "required": ["k", "v"]}]},
     [{"k": "a", "v": 1}, {"k": "b", "v": "s"}, {"k": "a", "v": "s"}, {"k": "c", "v": 1}]),
    ({"type": "object", "properties": {"v": {"oneOf": [{"type": "number"}, {"$ref": "#/$defs/e"}]}},
      "$defs": {"e": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer"}}]}}},
     [{"v": 1}, {"v": "x"}, {"v": [1]}, {"v": [1.5]}, {"v": None}]),
    ({"oneOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "string", "enum": ["c"]}, {"const": 1}, {"type": "null"}]},
     ["a", "c", "d", 1, None, 2]),
    ({"type": "array", "properties": {"a": {"type": "integer"}}, "required": ["a"], "items": {"type": "integer"}},
     [[], [1, 2], [{"a": 1}], {"a": 1}]),
    ({"type": ["integer", "null"], "minLength": 3, "pattern": "^a", "maxItems": 1, "minimum": 2}, [1, 2, None, "abc", [1]]),
    # a whole-number multipleOf on a number: an integer (XGrammar, negatives included; llguidance 1.7 writes none)
    ({"type": "number", "multipleOf": 2}, [-6, -3, 0, 4, 4.5, "4"]),  # (-4.0 is the value -4: written so)
    ({"type": ["number", "null"], "multipleOf": 3.0}, [-9, -3, 1, 6, None, 1.5]),
]


@pytest.mark.parametrize("schema,instances", REWRITES, ids=lambda x: json.dumps(x)[:60] if isinstance(x, dict) else "")
def test_rewrites_keep_the_valid_instances(schema: dict[str, Any], instances: list[Any]) -> None:
    out = rewrite_schema(schema)
    assert out != schema  # it rewrote something
    cls = jsonschema.validators.validator_for(schema)
    for x in instances:
        assert cls(schema).is_valid(x) == jsonschema.Draft202012Validator(out).is_valid(x), (x, out)
    for gone in ("not", "dependencies", "dependentRequired", "additionalItems", "oneOf"):
        assert gone not in json.dumps(out).replace('"not": {}', ""), out
    c = _strict(schema)  # and a backend now enforces it exactly
    for x in instances:
        assert _accepts(c, x) == cls(schema).is_valid(x), (x, c.backend)


def test_llguidance_is_reported_stricter_where_a_multiple_may_be_negative() -> None:
    """llguidance 1.7 writes no negative multiple (guidance-ai/llguidance#222): a ``multipleOf`` that
    bounds let go below zero is served on it as stricter than the schema, not as exact; a whole-number
    step on a number is an integer, which XGrammar enforces exactly."""
    loose_on_xgrammar = {"type": "object", "properties": {"t": {"type": "number", "multipleOf": 0.5}}, "required": ["t"]}
    d = decide_schema(loose_on_xgrammar)
    assert d.backend == "llguidance" and d.exact
    assert [(p.backend, p.keyword, p.pointer) for p in d.stricter] == [("llguidance", "multipleOf", "/properties/t")]
    c = _strict(loose_on_xgrammar)
    assert _accepts(c, {"t": 1.5}) and not _accepts(c, {"t": -1.5})  # the measured gap, reported
    at_or_above_zero = {"type": "number", "multipleOf": 0.5, "minimum": 0}
    assert decide_schema(at_or_above_zero).backend == "llguidance" and decide_schema(at_or_above_zero).stricter == ()
    ranged = {"type": "integer", "multipleOf": 5, "minimum": -100, "maximum": 100}  # XGrammar ignores multipleOf here
    assert decide_schema(ranged).backend == "llguidance" and decide_schema(ranged).stricter
    whole = {"type": "number", "multipleOf": 2}
    assert decide_schema(whole).backend == "xgrammar" and decide_schema(whole).stricter == ()
    assert _accepts(_strict(whole), -6) and not _accepts(_strict(whole), -3)


def test_keywords_of_an_excluded_type_are_dropped() -> None:
    assert rewrite_schema({"type": "array", "properties": {"a": {}}, "required": ["a"], "maxItems": 2}) == \
        {"type": "array", "maxItems": 2}
    assert rewrite_schema({"type": ["integer", "null"], "minLength": 3, "pattern": "^a", "minimum": 2}) == \
        {"type": ["integer", "null"], "minimum": 2}
    for kept in ({"type": "strng", "minLength": 1}, {"type": ["object", "array"], "items": {}, "required": ["a"]},
                 {"minLength": 1, "minimum": 1}):  # an unknown type name, both types, no type: all kept
        assert rewrite_schema(kept) == kept


def test_a_keyword_a_reference_leads_through_is_kept() -> None:
    """``items`` beside ``type: object`` has no effect, but a ``$ref`` may reach a schema under it."""
    schema = {"type": "object", "properties": {"a": {"$ref": "#/properties/b/items"},
                                               "b": {"type": "object", "items": {"type": "integer"}, "minItems": 2}}}
    out = rewrite_schema(schema)
    assert out["properties"]["b"] == {"type": "object", "items": {"type": "integer"}}  # (minItems: no reference)
    c = _strict(schema)
    assert _accepts(c, {"a": 1}) and not _accepts(c, {"a": "x"})


def test_a_rewrite_that_has_no_exact_form_is_left_alone() -> None:
    schema = {"type": "string", "not": {"pattern": "^a"}}
    assert rewrite_schema(schema) == schema
    overlapping = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    assert rewrite_schema(overlapping) == overlapping
    for shared in ({"oneOf": [{"const": 1}, {"const": 1.0}]}, {"oneOf": [{"enum": [1, "x"]}, {"type": "number"}]},
                   {"oneOf": [{"type": "number"}, {"$ref": "#/$defs/e"}], "$defs": {"e": {"anyOf": [{"minimum": 1}]}}},
                   {"oneOf": [{"type": "number"}, {"$ref": "#/$defs/e"}],  # a cycle: unknown
                    "$defs": {"e": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/e"}]}}}):
        assert rewrite_schema(shared) == shared, shared


# --- one verdict everywhere --------------------------------------------------------------------

class _Cache:
    def compile(self, constraint: Any) -> Any:
        from server.structured.grammar_cache import CompileResult

        return CompileResult(True, 0.0, False, None)


_DEV: list[dict[str, Any]] = []
TESTS = Path(__file__).resolve().parents[1]


def _records() -> list[dict[str, Any]]:
    """MaskBench's dev half when ``../shared/testdata`` (or $GRAMSERVE_TESTDATA) has it, else the
    JSONSchemaBench sample vendored in tests/data (a clone alone: the same kind of schemas, fewer)."""
    if not _DEV:
        path = mb.testdata_root() / "maskbench-dev.jsonl.gz"
        if path.exists():
            _DEV.extend(mb.load(path))
        else:
            vendored = sorted((TESTS / "data" / "jsonschemabench").glob("*/*.json"))
            # every vendored schema (the sample is small), as every 4th of the dev half below
            _DEV.extend(r for f in vendored for r in [{"id": f.name, **json.loads(f.read_text(encoding="utf-8"))}] * 4)
    return _DEV


@pytest.mark.parametrize("part", range(4))
def test_check_and_request_agree_on_the_dev_half(part: int) -> None:
    """Every 4th MaskBench dev schema (1,412; a quarter of those per case, to keep make test bounded):
    the schema check's strict verdict, backend and problems are the strict request's. The whole half
    is counted by ``python -m evals.maskbench`` (check / request disagreements: 0)."""
    for record in _records()[::4][part::4]:
        schema = record["schema"]
        report = check_schema_report({"schema": schema}, cache=_Cache())["items"][0]
        try:
            c = _strict(schema)
        except APIError as exc:
            assert not report["strict_ok"], record["id"]
            if not report["compiles"]:  # refused before the decision (size caps, $ref): the same message
                assert report["error"] == exc.message, record["id"]
            else:  # the decision's refusal: every problem the check lists, in the request's 400
                assert report["problems"] and all(p in exc.message for p in report["problems"]), record["id"]
            continue
        assert report["strict_ok"] and report["backend"] == c.backend, record["id"]
        assert decide_schema(schema).backend == c.backend


def test_precompile_compiles_on_the_requests_backend(make_app: Any) -> None:
    from server.structured.precompile import precompile_items

    built = make_app()
    schema = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}}, {"required": ["a"]}]}
    assert precompile_items(built.state, [schema]) == []
    c = build(ConstraintSpec(response_format={"type": "json_schema", "json_schema": {"schema": schema}})).constraint
    assert c.backend == "llguidance" and built.state.grammar_cache.compile(c).cached


# --- the engine's marker -----------------------------------------------------------------------

def test_a_llguidance_schema_travels_as_a_grammar_xgrammar_refuses() -> None:
    import xgrammar as xgr

    c = Constraint("json", {"type": "object", "properties": {"a": {"type": "integer"}}}, backend="llguidance")
    params = structured_outputs_params(c)
    assert params.json is None and params.grammar.startswith(GUIDANCE_JSON_PREFIX)
    assert json.loads(guidance_schema_text(params.grammar)) == c.value
    with pytest.raises(Exception):  # noqa: B017 - without the hybrid backend, XGrammar fails closed on it
        xgr.Grammar.from_lark(params.grammar)
    assert c.key != Constraint("json", c.value).key


def test_a_user_grammar_cannot_pose_as_the_marker() -> None:
    with pytest.raises(ConstraintError, match="llguidance grammars are not accepted"):
        constraint_from_request(response_format=None, structured_outputs={"grammar": GUIDANCE_JSON_PREFIX + "{}"},
                                tools=None, tool_format=None)
