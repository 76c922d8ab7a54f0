"""The request plan: every API's request built into one :class:`RequestPlan`, run by one loop
and framed per API.

``build`` turns a chat, completions or Responses request into a plan; ``run`` is the one run
loop (engine chunks to per-choice updates, streamed and not); ``chat_frames``,
``completion_frames`` and ``response_frames`` frame its updates for their API. Routes call
these; nothing below imports them.
"""
from server.plan.build import RequestPlan, build_plan

__all__ = ["RequestPlan", "build_plan"]
