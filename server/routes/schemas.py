"""POST /v1/schemas/check: how a schema (or a tools list) would be enforced."""
from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..errors import bad_request
from ..schema_check import check_schema_report, split_body
from ..structured import schema_limits
from ._body import read_json

__all__ = ["router"]

router = APIRouter()


@router.post("/v1/schemas/check")
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
    for label, schema in items:  # the same caps as a request's schemas
        schema_limits(state, schema, param=label)
    try:
        report = await asyncio.to_thread(check_schema_report, body, cache=state.grammar_cache)
    except ValueError as exc:
        raise bad_request(str(exc), code="invalid_value") from exc
    return JSONResponse(report)
