"""What vLLM 0.32's xgrammar path refuses in a JSON schema before compiling it.

A schema vLLM pre-screens away (``has_xgrammar_unsupported_json_features``) is sent as a
structural tag instead, which vLLM does not pre-screen; these rules mirror vLLM's.
"""
from __future__ import annotations

from server.json_types import JsonObject, JsonValue

__all__ = ["vllm_json_refusal"]

_VLLM_STRING_FORMATS = frozenset({
    "email", "date", "time", "date-time", "duration", "ipv4", "ipv6", "hostname", "uuid", "uri",
    "uri-reference", "uri-template", "json-pointer", "relative-json-pointer",
})


def vllm_json_refusal(schema: JsonValue) -> str | None:
    """Where and why vLLM 0.32's ``has_xgrammar_unsupported_json_features`` refuses ``schema``
    for ``structured_outputs.json`` (None when it accepts). Mirrors vLLM's rules."""

    def types(obj: JsonObject) -> set[str]:
        t = obj.get("type")
        return {t} if isinstance(t, str) else {x for x in t if isinstance(x, str)} if isinstance(t, list) else set()

    def bounded_pattern(obj: JsonObject) -> bool:
        return ("pattern" in obj or "format" in obj) and ("minLength" in obj or "maxLength" in obj)

    def why(obj: JsonObject) -> str | None:
        ts = types(obj)
        if ts & {"integer", "number"} and "multipleOf" in obj:
            return "multipleOf"
        if "array" in ts and any(k in obj for k in ("uniqueItems", "contains", "minContains", "maxContains")):
            return "uniqueItems/contains on an array"
        if "string" in ts and "format" in obj and obj["format"] not in _VLLM_STRING_FORMATS:
            return f"string format {obj['format']!r}"
        if "string" in ts and bounded_pattern(obj):
            return "pattern/format together with minLength/maxLength"
        if "object" in ts and "propertyNames" in obj:
            pn = obj.get("propertyNames")
            if (isinstance(pn, dict) and bounded_pattern(pn)) or "patternProperties" in obj or "properties" in obj:
                return "propertyNames combined with other object keywords"
            if obj.get("unevaluatedProperties", True) is not True:
                return "propertyNames with unevaluatedProperties"
        pattern_props = obj.get("patternProperties")
        if "object" in ts and isinstance(pattern_props, dict):
            if "properties" in obj or len(pattern_props) > 1:
                return "patternProperties combined with properties or several patterns"
        allof = obj.get("allOf")
        if isinstance(allof, list) and len(allof) >= 2:
            return "allOf with several branches"
        return None

    def walk(obj: JsonValue, pointer: str) -> str | None:
        if not isinstance(obj, dict):
            return None
        reason = why(obj)
        if reason:
            return f"{reason} at {pointer or '/'}"
        for key, value in obj.items():
            if isinstance(value, dict):
                found = walk(value, f"{pointer}/{key}")
                if found:
                    return found
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    found = walk(item, f"{pointer}/{key}/{i}") if isinstance(item, dict) else None
                    if found:
                        return found
        return None

    return walk(schema, "")
