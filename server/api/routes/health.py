"""GET /health: 200 only when the engine answers and the server takes requests."""
from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from server.engine.base import EngineDeadError

__all__ = ["router"]

router = APIRouter()


@router.get("/health")
@router.head("/health")  # two routes, not api_route(methods=[...]): one operationId per method
async def health(request: Request) -> JSONResponse:
    state = request.app.state.gs
    if state.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    if not state.ready:
        return JSONResponse({"status": "starting"}, status_code=503)
    if state.engine_dead:
        return JSONResponse({"status": "engine_dead"}, status_code=503)
    try:
        await asyncio.wait_for(state.engine.check_health(), timeout=5.0)
    except (TimeoutError, EngineDeadError) as exc:
        if isinstance(exc, EngineDeadError):
            state.engine_dead = True
        return JSONResponse({"status": "unhealthy", "detail": str(exc) or type(exc).__name__}, status_code=503)
    return JSONResponse({"status": "ok"})
