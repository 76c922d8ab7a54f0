"""GET /v1/models and /v1/models/{model}."""
from __future__ import annotations

import time

from fastapi import APIRouter, Request

from server.state import check_model

__all__ = ["router"]

router = APIRouter()
_CREATED = int(time.time())


def _card(name: str, max_model_len: int) -> dict:
    return {"id": name, "object": "model", "created": _CREATED, "owned_by": "gramserve",
            "max_model_len": max_model_len}


@router.get("/v1/models")
async def list_models(request: Request) -> dict:
    eng = request.app.state.gs.engine
    return {"object": "list", "data": [_card(eng.model_name, eng.max_model_len)]}


@router.get("/v1/models/{model:path}")
async def get_model(model: str, request: Request) -> dict:
    state = request.app.state.gs
    check_model(state, model)
    return _card(state.engine.model_name, state.engine.max_model_len)
