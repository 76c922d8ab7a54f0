"""Server-sent events exactly as the OpenAI API frames them.

Each event is ``data: <json>\\n\\n``; the stream ends with ``data: [DONE]\\n\\n``. An
error after the stream started is sent as one ``data: {"error": ...}`` event before
``[DONE]`` (the HTTP status is already 200 by then), which the OpenAI SDK raises.
"""
from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from typing import NotRequired, TypedDict

from server.json_types import JsonObject

__all__ = ["DONE", "ChunkBody", "ContentFrames", "Events", "chunk", "each_event", "sse_event"]

DONE = b"data: [DONE]\n\n"
# An item of an event stream: the events of one write, or a run of single events to write as they
# come (a choice's lane, server/plan/lanes.py), which the response iterates itself.
Events = bytes | AsyncGenerator[bytes, None]
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # one, not one per event


class ChunkBody(TypedDict):
    """A ``chat.completion.chunk`` (or ``text_completion``) object as it goes on the wire."""

    id: str
    object: str
    created: int
    model: str
    system_fingerprint: None
    choices: list[JsonObject]
    usage: NotRequired[JsonObject]


def sse_event(payload: Mapping[str, object]) -> bytes:
    """One event; ``payload`` is a JSON object (a chunk, an error body), encoded as it is."""
    return b"data: " + _ENCODER.encode(payload).encode() + b"\n\n"


class ContentFrames:
    """The hot path of a stream, a text delta of one choice, framed from pre-encoded bytes:
    byte for byte ``sse_event(chunk(...))`` of that delta, without building and encoding the
    whole chunk per token (``object``: ``text_completion`` for the completions API's :meth:`text`)."""

    def __init__(self, *, id: str, created: int, model: str, object: str = "chat.completion.chunk") -> None:
        head = _ENCODER.encode(chunk(id=id, created=created, model=model, choices=[], object=object))
        assert head.endswith(',"choices":[]}')
        self._head = b"data: " + head[: -len("[]}")].encode() + b'[{"index":'

    def content(self, index: int, text: str) -> bytes:
        return (self._head + str(index).encode() + b',"delta":{"content":' + _ENCODER.encode(text).encode()
                + b'},"logprobs":null,"finish_reason":null}]}\n\n')

    def text(self, index: int, text: str) -> bytes:
        """A completions choice's next text (``object="text_completion"``)."""
        return (self._head + str(index).encode() + b',"text":' + _ENCODER.encode(text).encode()
                + b',"logprobs":null,"finish_reason":null}]}\n\n')

    def arguments(self, index: int, call: int, text: str) -> bytes:
        """The other per-token event: a fragment of tool call ``call``'s arguments."""
        return (self._head + str(index).encode() + b',"delta":{"tool_calls":[{"index":' + str(call).encode()
                + b',"function":{"arguments":' + _ENCODER.encode(text).encode()
                + b'}}]},"logprobs":null,"finish_reason":null}]}\n\n')


def chunk(
    *,
    id: str,
    created: int,
    model: str,
    choices: list[JsonObject],
    object: str = "chat.completion.chunk",
    usage: JsonObject | None = None,
) -> ChunkBody:
    """One ``chat.completion.chunk`` (or ``text_completion``) object.

    With ``stream_options.include_usage`` OpenAI sends ``"usage": null`` on every chunk
    and the usage on a last chunk whose ``choices`` is empty.
    """
    body: ChunkBody = {
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


async def each_event(stream: AsyncGenerator[Events, None]) -> AsyncGenerator[bytes, None]:
    """Every write of an event stream in order, the runs' events one by one (``SSEResponse``'s order,
    for a reader that is not the HTTP response); closing it closes the stream."""
    try:
        async for item in stream:
            if isinstance(item, bytes):
                yield item
                continue
            try:
                async for event in item:
                    yield event
            finally:
                await item.aclose()
    finally:
        await stream.aclose()
