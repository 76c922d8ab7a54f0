"""GET /metrics: Prometheus text (ours and vLLM's engine metrics, one registry).

With ``--api-server-count`` > 1 every API process writes its metrics to files in
``PROMETHEUS_MULTIPROC_DIR`` (server/api_servers.py) and any process answers with all of them merged:
one view, whichever process the scrape lands on.
"""
from __future__ import annotations

import logging
import os

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess

__all__ = ["router"]

router = APIRouter()
log = logging.getLogger("gramserve.metrics")


@router.get("/metrics")
async def prometheus_metrics(request: Request) -> Response:
    try:
        request.app.state.gs.engine.flush_metrics()  # the engine's metrics may wait for the read
    except Exception:  # noqa: BLE001 - vLLM's stats failing to record must not take gramserve's own metrics with them
        log.exception("the engine's metrics could not be brought up to date; serving the rest")
    return Response(generate_latest(_registry()), media_type=CONTENT_TYPE_LATEST)


def _registry() -> CollectorRegistry:
    """This process's registry, or every API process's metrics merged (multiprocess mode)."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry
