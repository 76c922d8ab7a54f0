"""Server-sent events exactly as the OpenAI API frames them.

Each event is ``data: <json>\\n\\n``; the stream ends with ``data: [DONE]\\n\\n``. An
error after the stream started is sent as one ``data: {"error": ...}`` event before
``[DONE]`` (the HTTP status is already 200 by then), which the OpenAI SDK raises.
"""
from __future__ import annotations

import json
from typing import Any

__all__ = ["DONE", "sse_event", "chunk"]

DONE = b"data: [DONE]\n\n"


def sse_event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def chunk(
    *,
    id: str,
    created: int,
    model: str,
    choices: list[dict[str, Any]],
    object: str = "chat.completion.chunk",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` (or ``text_completion``) object.

    With ``stream_options.include_usage`` OpenAI sends ``"usage": null`` on every chunk
    and the usage on a last chunk whose ``choices`` is empty.
    """
    body: dict[str, Any] = {
        "id": id,
        "object": object,
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
    }
    if usage is not None:
        body["usage"] = usage
    return body
