"""POST /v1/completions."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from server.api.lean_route import LeanRoute
from server.api.routes._body import completion_docs, parse_body
from server.api.routes._plan import plan_request
from server.api.sse_response import SSEResponse
from server.chat.stream_guard import unless_disconnected
from server.plan.completion_frames import completion_response, completion_stream
from server.protocol import CompletionRequest

__all__ = ["router"]

router = APIRouter(route_class=LeanRoute)
_DOCS = completion_docs(CompletionRequest, "text_completion", {"text": {"type": "string"}}, {
    "text": {"prompt": "Once upon a time", "max_tokens": 16},
    "stream": {"prompt": ["Once upon a time", "In a galaxy"], "stream": True, "n": 2},
})


@router.post("/v1/completions", openapi_extra=_DOCS)
async def create_completion(request: Request):
    req = await parse_body(request, CompletionRequest)
    state = request.app.state.gs
    plan = await plan_request(request, req)  # on the loop when cheap (server/loop_budget.py)
    if req.stream:
        return SSEResponse(completion_stream(state, plan))
    return JSONResponse(await unless_disconnected(completion_response(state, plan), request.receive))
