"""The Responses API (``/v1/responses``): its request shape, its translation and its store.

A Responses request is translated into the chat request it means (:mod:`.translate`), then
planned, run and framed by :mod:`server.plan` exactly as chat is (the framer is
``server/plan/response_frames.py``). Stored responses live in a bounded store (:mod:`.store`).
"""
