"""POST /v1/schemas/check: how a schema (or a tools list) would be enforced."""
from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from server.api.routes._body import json_body_docs, read_json
from server.errors import bad_request
from server.json_types import JsonObject
from server.structured.from_request import capabilities, schema_limits, state_memo
from server.structured.schema_check import check_schema_report, split_body

__all__ = ["router"]

router = APIRouter()
_BODY: JsonObject = {"title": "SchemaCheckRequest", "anyOf": [{"type": "object"}, {"type": "array", "items": {"type": "object"}}],
         "description": "A JSON Schema, {\"schema\": <JSON Schema>}, {\"tools\": [<OpenAI tool>, ...]} or that list."}
_REPORT: JsonObject = {"type": "object", "required": ["ok", "items"], "properties": {
    "ok": {"type": "boolean"},
    "items": {"type": "array", "items": {
        "type": "object", "required": ["name", "compiles", "error", "strict_ok", "problems", "keywords"],
        "properties": {"name": {"type": "string"}, "compiles": {"type": "boolean"},
                       "error": {"type": ["string", "null"]}, "compile_seconds": {"type": ["number", "null"]},
                       "cached": {"type": "boolean"}, "strict_ok": {"type": "boolean"},
                       "problems": {"type": "array"}, "keywords": {"type": "array"}}}}}}
_CITY: JsonObject = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
_DOCS = json_body_docs(_BODY, _REPORT, {
    "schema": {"schema": _CITY},
    "tools": {"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": _CITY}}]},
})


@router.post("/v1/schemas/check", openapi_extra=_DOCS)
async def check_schema(request: Request) -> JSONResponse:
    body = await read_json(request)
    state = request.app.state.gs
    try:
        items = split_body(body)
    except ValueError as exc:
        raise bad_request(str(exc), code="invalid_value") from exc
    if len(items) > state.settings.max_tools:
        raise bad_request(f"Too many schemas: {len(items)} (this server accepts at most {state.settings.max_tools}).",
                          param="tools", code="too_many_tools")
    caps = capabilities(state)
    for label, schema in items:  # the same caps as a request's schemas
        schema_limits(caps.limits, schema, param=label)
    try:  # the spec a request with this body builds, through the same memo and cache
        report = await asyncio.to_thread(check_schema_report, body, cache=state.grammar_cache, caps=caps,
                                         memo=state_memo(state))
    except ValueError as exc:
        raise bad_request(str(exc), code="invalid_value") from exc
    return JSONResponse(report)
