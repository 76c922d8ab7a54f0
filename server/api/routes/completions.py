"""POST /v1/completions."""
from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from server.api.routes._body import completion_docs, parse_body
from server.api.sse_response import SSEResponse
from server.chat.stream_guard import unless_disconnected
from server.plan import build_plan
from server.plan.completion_frames import completion_response, completion_stream
from server.protocol import CompletionRequest

__all__ = ["router"]

router = APIRouter()
_DOCS = completion_docs(CompletionRequest, "text_completion", {"text": {"type": "string"}}, {
    "text": {"prompt": "Once upon a time", "max_tokens": 16},
    "stream": {"prompt": ["Once upon a time", "In a galaxy"], "stream": True, "n": 2},
})


@router.post("/v1/completions", openapi_extra=_DOCS)
async def create_completion(request: Request):
    req = await parse_body(request, CompletionRequest)
    state = request.app.state.gs
    plan = await asyncio.to_thread(build_plan, state, req)  # tokenize + grammar compile off the loop
    if req.stream:
        return SSEResponse(completion_stream(state, plan))
    return JSONResponse(await unless_disconnected(completion_response(state, plan), request.receive))
