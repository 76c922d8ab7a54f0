"""POST /v1/chat/completions."""
from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ..chat_service import chat_response, chat_stream, prepare_chat
from ..protocol import ChatCompletionRequest
from ..stream_guard import unless_disconnected
from ._body import parse_body

__all__ = ["router"]

router = APIRouter()

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@router.post("/v1/chat/completions")
async def create_chat_completion(request: Request):
    req = await parse_body(request, ChatCompletionRequest)
    state = request.app.state.gs
    prepared = await asyncio.to_thread(prepare_chat, state, req)  # render + grammar compile off the loop
    if req.stream:
        return StreamingResponse(chat_stream(state, prepared), media_type="text/event-stream", headers=SSE_HEADERS)
    body, headers = await unless_disconnected(chat_response(state, prepared), request.receive)
    return JSONResponse(body, headers=headers)
