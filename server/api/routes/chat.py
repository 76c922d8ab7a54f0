"""POST /v1/chat/completions."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from server.api.lean_route import LeanRoute
from server.api.routes._body import completion_docs, parse_body
from server.api.routes._plan import plan_request
from server.api.sse_response import SSEResponse
from server.chat.stream_guard import unless_disconnected
from server.json_types import JsonArray, JsonObject
from server.plan.chat_frames import chat_response, chat_stream
from server.protocol import ChatCompletionRequest

__all__ = ["router"]

router = APIRouter(route_class=LeanRoute)

_HI: JsonArray = [{"role": "user", "content": "What is the weather in Paris?"}]
_CITY: JsonObject = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
_WEATHER: JsonObject = {"type": "function", "function": {"name": "get_weather", "parameters": _CITY}}
_DOCS = completion_docs(ChatCompletionRequest, "chat.completion", {"message": {
    "type": "object", "required": ["role"], "properties": {"role": {"const": "assistant"}}}}, {
    "text": {"messages": _HI, "max_tokens": 64},
    "stream": {"messages": _HI, "stream": True, "stream_options": {"include_usage": True}},
    "tools": {"messages": _HI, "tools": [_WEATHER], "tool_choice": "auto"},
    "json_schema": {"messages": _HI, "response_format": {"type": "json_schema", "json_schema": {
        "name": "weather", "strict": True, "schema": _CITY}}},
})


@router.post("/v1/chat/completions", openapi_extra=_DOCS)
async def create_chat_completion(request: Request):
    req = await parse_body(request, ChatCompletionRequest)
    state = request.app.state.gs
    plan = await plan_request(request, req)  # on the loop when cheap (server/loop_budget.py)
    if req.stream:
        return SSEResponse(chat_stream(state, plan))
    body, headers = await unless_disconnected(chat_response(state, plan), request.receive)
    return JSONResponse(body, headers=headers)
