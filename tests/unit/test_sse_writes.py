"""Fewer, fuller writes (docs/performance.md): events that are ready together go out as one body
message (one socket write), never held for what is not ready: one write per engine chunk while it
streams, and the last chunk's events, the usage and the stream's end together."""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from server.chat.sse import DONE
from server.engine.base import EngineDeadError, GenerateRequest, TokenChunk

USER = [{"role": "user", "content": "hi"}]
PIECES = ["Hello", " world", "!"]


def _writes(app: Any, path: str, body: dict[str, Any]) -> list[bytes]:
    """The body messages the app sends for one request, each as it went out (one write each)."""
    raw = json.dumps(body).encode()
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": raw, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.sleep(3600)  # the client stays
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "headers": [(b"content-type", b"application/json"),
                                          (b"content-length", str(len(raw)).encode())],
             "client": ("127.0.0.1", 1), "server": ("test", 80)}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    bodies = [m for m in sent[1:] if m["type"] == "http.response.body"]
    assert bodies[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    return [m["body"] for m in bodies[:-1]]


def _events(write: bytes) -> list[bytes]:
    """A write's SSE events (each write holds whole events)."""
    assert write.endswith(b"\n\n")
    return [e + b"\n\n" for e in write[:-2].split(b"\n\n")]


def test_chat_one_write_per_engine_chunk_and_the_end_with_the_last(make_app) -> None:
    built = make_app(script=lambda req: PIECES)
    writes = _writes(built.app, "/v1/chat/completions",
                     {"messages": USER, "stream": True, "stream_options": {"include_usage": True}})
    assert len(writes) == len(PIECES)  # not one more for the finish, the usage or [DONE]
    kinds = [[json.loads(e[6:]) if e != DONE else "DONE" for e in _events(w)] for w in writes]
    assert [len(k) for k in kinds] == [2, 1, 4]  # role + "Hello"; " world"; "!" + finish + usage + [DONE]
    assert kinds[0][0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(k["choices"][0]["delta"].get("content", "") for w in kinds for k in w[:2]
                   if k != "DONE" and k["choices"]) == "Hello world!"
    assert kinds[2][1]["choices"][0]["finish_reason"] == "stop" and kinds[2][2]["usage"]["completion_tokens"] > 0
    assert kinds[2][3] == "DONE"


def test_chat_n2_every_choice_finishes_before_the_end(make_app) -> None:
    built = make_app(script=lambda req: PIECES)
    writes = _writes(built.app, "/v1/chat/completions", {"messages": USER, "stream": True, "n": 2,
                                                         "temperature": 1.0})
    assert writes[-1].endswith(b'"finish_reason":"stop"}]}\n\n' + DONE)
    finishes = [json.loads(e[6:])["choices"][0]["index"] for w in writes for e in _events(w)
                if e != DONE and b'"finish_reason":"stop"' in e]
    assert sorted(finishes) == [0, 1] and writes[-1].count(DONE) == 1 and b"".join(writes).count(DONE) == 1


def test_completions_end_with_the_last_chunk(make_app) -> None:
    built = make_app(script=lambda req: PIECES)
    writes = _writes(built.app, "/v1/completions", {"prompt": "hi", "stream": True,
                                                    "stream_options": {"include_usage": True}})
    assert len(writes) == len(PIECES)
    last = _events(writes[-1])
    assert len(last) == 3 and b'"finish_reason":"stop"' in last[0] and b'"usage"' in last[1] and last[2] == DONE


def test_responses_start_together_and_end_together(make_app) -> None:
    built = make_app(script=lambda req: PIECES)
    writes = _writes(built.app, "/v1/responses", {"input": "hi", "stream": True})
    kinds = [[json.loads(e.split(b"\ndata: ", 1)[1])["type"] for e in _events(w)] for w in writes]
    assert kinds[0] == ["response.created", "response.in_progress"]
    assert kinds[-1][-1] == "response.completed" and "response.output_item.done" in kinds[-1]
    assert kinds[-1][0] == "response.output_text.delta"  # the last chunk's delta leads its write
    seqs = [json.loads(e.split(b"\ndata: ", 1)[1])["sequence_number"] for w in writes for e in _events(w)]
    assert seqs == list(range(len(seqs)))


def test_a_failure_ends_the_stream_in_one_write(make_app) -> None:
    built = make_app(script=lambda req: PIECES)

    async def dies(req: GenerateRequest) -> AsyncIterator[TokenChunk]:
        yield TokenChunk(index=0, text="Hel", num_tokens=3, finish_reason=None, logprobs=(), prompt_tokens=1)
        raise EngineDeadError("gone")

    built.engine.generate = dies  # type: ignore[method-assign]
    writes = _writes(built.app, "/v1/chat/completions", {"messages": USER, "stream": True})
    assert len(writes) == 2
    last = _events(writes[1])
    assert len(last) == 2 and b'"error"' in last[0] and last[1] == DONE


def test_events_go_to_the_servers_own_send(make_app) -> None:
    """The app puts the server's ``send`` in the scope; every event of a stream is sent with it
    directly, not through the middleware wrappers (server/api/app.py, server/api/sse_response.py)."""
    import sys

    from server.api.sse_response import BODY_SEND

    built = make_app(script=lambda req: PIECES)
    raw = json.dumps({"messages": USER, "stream": True}).encode()
    depth: list[int] = []
    messages = [{"type": "http.request", "body": raw, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            caller = sys._getframe(1)
            depth.append(caller.f_code.co_name == "__call__" and "sse_response" in caller.f_code.co_filename)

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
             "query_string": b"", "root_path": "", "headers": [(b"content-type", b"application/json")],
             "client": ("127.0.0.1", 1), "server": ("test", 80)}
    asyncio.run(built.app(scope, receive, send))
    assert scope[BODY_SEND] is send
    assert depth and all(depth)  # each event: sent by the SSE response itself, no wrapper between
