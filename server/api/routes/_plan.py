"""Where a generation route builds its plan: on the event loop when it is cheap, in a worker
thread when it may block (``server/loop_budget.py`` says why)."""
from __future__ import annotations

import asyncio
from functools import partial

from fastapi import Request

from server.loop_budget import INLINE_MAX_BODY_BYTES, OffLoop, inline
from server.plan import RequestPlan, build_plan
from server.protocol import ChatCompletionRequest, CompletionRequest
from server.responses.protocol import ResponsesRequest
from server.responses.store import ResponseStore

__all__ = ["plan_request"]


async def plan_request(request: Request, req: ChatCompletionRequest | CompletionRequest | ResponsesRequest, *,
                       store: ResponseStore | None = None) -> RequestPlan:
    """``build_plan`` for a parsed request: on the loop when the body is small and no step misses
    a cache (a schema analysed, a grammar compiled), else in a worker thread."""
    state = request.app.state.gs
    build = partial(build_plan, state, req, store=store)
    if len(await request.body()) <= INLINE_MAX_BODY_BYTES:  # read and kept by parse_body: no I/O here
        try:
            with inline():
                return build()
        except OffLoop:
            pass
    return await asyncio.to_thread(build)
