"""GET /metrics: Prometheus text (ours and vLLM's engine metrics, one registry)."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

__all__ = ["router"]

router = APIRouter()


@router.get("/metrics")
async def prometheus_metrics(request: Request) -> Response:
    request.app.state.gs.engine.flush_metrics()  # the engine's metrics may wait for the read
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
