"""Schemas and tools for budget-aware closing: hand-written ones for each kind of thing left open,
JSONSchemaBench schemas and BFCL tools (vendored in tests/data, so no ../shared is needed)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["SCHEMAS", "TOOLS", "bench_schemas", "guidance_cases", "xgrammar_cases"]

DATA = Path(__file__).resolve().parents[1] / "data"

SCHEMAS: dict[str, Any] = {
    "required nested": {
        "type": "object", "additionalProperties": False, "required": ["user", "ok"],
        "properties": {"user": {"type": "object", "additionalProperties": False, "required": ["name", "age"],
                                "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                               "nick": {"type": "string"}}},
                       "ok": {"type": "boolean"}}},
    "arrays": {
        "type": "object", "additionalProperties": False, "required": ["tags", "scores"],
        "properties": {"tags": {"type": "array", "items": {"type": "string", "minLength": 2}, "minItems": 2},
                       "scores": {"type": "array", "items": {"type": "number"}}}},
    "enums and bounds": {
        "type": "object", "additionalProperties": False, "required": ["color", "count", "ratio"],
        "properties": {"color": {"enum": ["red", "green", "dark blue"]},
                       "count": {"type": "integer", "minimum": 18, "maximum": 99},
                       "ratio": {"type": "number", "exclusiveMinimum": 0}}},
    "pattern and format": {
        "type": "object", "additionalProperties": False, "required": ["code", "when", "mail"],
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                       "when": {"type": "string", "format": "date"},
                       "mail": {"type": "string", "format": "email"}}},
    "anyOf": {
        "type": "object", "additionalProperties": False, "required": ["value"],
        "properties": {"value": {"anyOf": [{"type": "integer"}, {"type": "object", "required": ["x"],
                                                                   "properties": {"x": {"type": "string"}},
                                                                   "additionalProperties": False}]}}},
    "optional only": {
        "type": "object", "additionalProperties": False,
        "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "integer"}}}},
    "top-level array": {"type": "array", "minItems": 1, "maxItems": 5,
                        "items": {"type": "object", "required": ["id"], "additionalProperties": False,
                                  "properties": {"id": {"type": "integer"}, "label": {"type": "string"}}}},
    "long strings": {
        "type": "object", "additionalProperties": False, "required": ["title", "body"],
        "properties": {"title": {"type": "string", "minLength": 5, "maxLength": 40},
                       "body": {"type": "string"}}},
}

#: JSONSchemaBench schemas (vendored), by file.
_BENCH = ("Github_trivial/Github_trivial---o10055.json", "Github_easy/Github_easy---o10009.json",
          "Github_medium/Github_medium---o12610.json", "Glaiveai2K/Glaiveai2K---calculate_area_0544ef30.json",
          "Github_easy/Github_easy---o10514.json", "Github_medium/Github_medium---o15203.json",
          "JME/JME_19.json", "Snowplow/Snowplow---sp_167_Normalized.json",
          "WashingtonPost/WashingtonPost---wp_106_Normalized.json")


def bench_schemas() -> dict[str, Any]:
    root = DATA / "jsonschemabench"
    return {name.split("/")[-1].removesuffix(".json"): json.loads((root / name).read_text())["schema"]
            for name in _BENCH}


def _bfcl_tools(count: int) -> list[tuple[str, Any]]:
    tools = []
    for line in (DATA / "bfcl" / "simple_python.jsonl").read_text().splitlines()[:count]:
        fn = json.loads(line)["tools"][0]["function"]
        tools.append((fn["name"], fn["parameters"]))
    return tools


#: BFCL tools: (name, parameters).
TOOLS: list[tuple[str, Any]] = _bfcl_tools(4)


def xgrammar_cases() -> dict[str, tuple[Any, Any]]:
    """The hand-written and JSONSchemaBench schemas that run on XGrammar: name -> (schema, as sent)."""
    from server.structured.schema_plan import decide_schema

    out = {}
    for name, schema in {**SCHEMAS, **bench_schemas()}.items():
        decision = decide_schema(schema)
        if decision.backend == "xgrammar":
            out[name] = (schema, decision.xgrammar_schema)
    return out


def guidance_cases(count: int = 4) -> dict[str, tuple[Any, Any]]:
    """The first ``count`` vendored GitHub schemas that run on llguidance: name -> (schema, as sent)."""
    from server.structured.schema_plan import decide_schema

    out = {}
    for path in sorted((DATA / "jsonschemabench").glob("Github_*/*.json")):
        schema = json.loads(path.read_text())["schema"]
        try:
            decision = decide_schema(schema)
        except Exception:  # noqa: BLE001 - a schema refused outright is not a case
            continue
        if decision.backend == "llguidance" and len(json.dumps(schema)) < 6000:
            out[path.stem] = (schema, decision.llguidance_schema)
        if len(out) == count:
            break
    return out
