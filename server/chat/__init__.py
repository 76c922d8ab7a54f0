"""Requests to answers: prompt rendering, engine calls, message streams, SSE."""
