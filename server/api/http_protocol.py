"""uvicorn's HTTP protocol, with the OpenAI error envelope for requests it cannot parse.

Broken framing (a bad request line, an invalid header, a malformed chunk) never reaches the
app: uvicorn answers it itself, as plain text. This subclass answers with the same JSON
envelope as every other error, so a client's error handling has one shape to read.
"""
from __future__ import annotations

import json

from uvicorn.protocols.http.auto import AutoHTTPProtocol

from server.errors import APIError

__all__ = ["EnvelopeHTTPProtocol", "framing_error_response"]


def framing_error_response(msg: str) -> bytes:
    """The whole HTTP/1.1 400 response for a request uvicorn could not parse."""
    body = json.dumps(APIError(f"{msg.rstrip('.')}: the request is not valid HTTP/1.1.",
                               code="invalid_http").body()).encode()
    return (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)


class EnvelopeHTTPProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
    """httptools (or h11) as uvicorn picks it; only the 400 for unparsable requests differs."""

    def send_400_response(self, msg: str) -> None:
        self.transport.write(framing_error_response(msg))
        self.transport.close()
