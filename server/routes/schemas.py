"""POST /v1/schemas/check: how a schema (or a tools list) would be enforced."""
from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..errors import bad_request
from ..schema_check import check_schema_report

__all__ = ["router"]

router = APIRouter()


@router.post("/v1/schemas/check")
async def check_schema(request: Request) -> JSONResponse:
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"We could not parse the JSON body of your request ({exc}).", code="invalid_json") from exc
    state = request.app.state.gs
    try:
        report = await asyncio.to_thread(check_schema_report, body, cache=state.grammar_cache)
    except ValueError as exc:
        raise bad_request(str(exc), code="invalid_value") from exc
    return JSONResponse(report)
