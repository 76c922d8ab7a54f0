"""POST /v1/responses, GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from server.api.lean_route import LeanRoute
from server.api.routes._body import parse_body
from server.api.routes._plan import plan_request
from server.api.sse_response import SSEResponse
from server.chat.stream_guard import unless_disconnected
from server.plan.response_frames import response_body, response_stream
from server.responses.protocol import ResponsesRequest
from server.responses.store import ResponseStore

__all__ = ["router", "new_store"]

router = APIRouter()



def new_store(settings: object) -> ResponseStore:
    """The process's response store, sized by ``--responses-store-size`` / ``--responses-store-ttl``."""
    return ResponseStore(max_entries=settings.responses_store_size,  # type: ignore[attr-defined]
                         ttl_s=settings.responses_store_ttl)  # type: ignore[attr-defined]


def _store(request: Request) -> ResponseStore:
    return request.app.state.responses_store


async def create_response(request: Request):
    req = await parse_body(request, ResponsesRequest)
    state, store = request.app.state.gs, _store(request)
    plan = await plan_request(request, req, store=store)  # on the loop when cheap (server/loop_budget.py)
    if req.stream:
        return SSEResponse(response_stream(state, store, plan))
    body, headers = await unless_disconnected(response_body(state, store, plan), request.receive)
    return JSONResponse(body, headers=headers)


router.add_api_route("/v1/responses", create_response, methods=["POST"], route_class_override=LeanRoute)


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: str, request: Request):
    return JSONResponse(_store(request).get(response_id).body)


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request):
    _store(request).delete(response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(response_id: str, request: Request):
    items = [{"id": item.get("id") or f"msg_{response_id[5:]}_{i}", **item}
             for i, item in enumerate(_store(request).get(response_id).input_items)]
    return JSONResponse({"object": "list", "data": items, "first_id": items[0]["id"] if items else None,
                         "last_id": items[-1]["id"] if items else None, "has_more": False})
