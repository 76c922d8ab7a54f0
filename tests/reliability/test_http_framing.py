"""Broken HTTP framing gets the JSON error envelope (uvicorn answers it before the app)."""
from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from ._probe import assert_healthy

pytestmark = pytest.mark.reliability

BROKEN = [
    b"GARBAGE\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /health HTTP/1.1\r\nBad Header Line\r\n\r\n",
]


def _exchange(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(raw)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


@pytest.mark.parametrize("raw", BROKEN, ids=range(len(BROKEN)))
def test_broken_framing_is_a_json_400(server: Any, http: Any, model: str, raw: bytes) -> None:
    reply = _exchange(server.port, raw)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), reply[:200]
    assert b"application/json" in head.lower()
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == "invalid_http"
    assert_healthy(http, model)
