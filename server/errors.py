"""One OpenAI error envelope for everything: ``{"error": {message, type, param, code}}``.

Every failure the server can name is an :class:`APIError` with a ``code`` from :data:`CATALOG`,
which fixes its HTTP status and OpenAI ``type`` in one place (the README's table is checked
against it by a test). Domain errors (:class:`ConstraintError` style subclasses in the feature
packages) are ``APIError`` s carrying their code and param, so one handler maps them all.
A message that names parameters is given as a function of a namer, so the Responses API can
rename parameters by a map (:meth:`APIError.renamed`) instead of rewriting message text.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from pydantic_core import ErrorDetails
from starlette.exceptions import HTTPException as StarletteHTTPException

from server.json_types import JsonObject

__all__ = [
    "CATALOG",
    "APIError",
    "ClientGone",
    "ErrorKind",
    "Namer",
    "internal_error",
    "bad_request",
    "error_body",
    "as_api_error",
    "install_error_handlers",
    "validation_error",
]

log = logging.getLogger("gramserve.errors")

Namer = Callable[[str], str]
"""Maps a chat parameter name to the name the answering API uses (identity for chat)."""


@dataclass(frozen=True)
class ErrorKind:
    """What a code means on the wire: HTTP status, OpenAI error ``type``, default ``param``."""

    status: int
    type: str = "invalid_request_error"
    param: str | None = None


_SERVER = "server_error"
CATALOG: dict[str, ErrorKind] = {
    "invalid_json": ErrorKind(400),
    "invalid_http": ErrorKind(400),
    "missing_required_parameter": ErrorKind(400),
    "invalid_value": ErrorKind(400),
    "invalid_type": ErrorKind(400),
    "context_length_exceeded": ErrorKind(400),
    "invalid_schema": ErrorKind(400),
    "unsupported_schema": ErrorKind(400),
    "invalid_constraint": ErrorKind(400),
    "max_tokens_too_small": ErrorKind(400),  # below the shortest complete answer (budget-aware closing)
    "too_many_tools": ErrorKind(400, param="tools"),
    "tools_unsupported": ErrorKind(400, param="tools"),
    "schema_too_large": ErrorKind(400),
    "schema_too_deep": ErrorKind(400),
    "unsupported_parameter": ErrorKind(400),
    "unsupported_content": ErrorKind(400),
    "unsupported_item": ErrorKind(400),
    "unsupported_tool": ErrorKind(400),
    "invalid_api_key": ErrorKind(401),
    "model_not_found": ErrorKind(404, param="model"),
    "not_found": ErrorKind(404),
    "method_not_allowed": ErrorKind(405),
    "request_too_large": ErrorKind(413),
    "too_many_requests": ErrorKind(429, "rate_limit_error"),
    "headers_too_large": ErrorKind(431),
    "client_closed_request": ErrorKind(499),
    "internal_error": ErrorKind(500, _SERVER),
    "unavailable": ErrorKind(503, _SERVER),
    "engine_dead": ErrorKind(503, _SERVER),
    "server_shutdown": ErrorKind(503, _SERVER),
    "aborted": ErrorKind(503, _SERVER),
}


def _same(name: str) -> str:
    return name


class APIError(Exception):
    """An error with an OpenAI-style body; status and type come from its catalogued ``code``.

    ``message`` is text, or a function of a :data:`Namer` when it names parameters (rendered
    with the identity for chat, with the Responses names by :meth:`renamed`).
    """

    def __init__(self, message: str | Callable[[Namer], str], *, code: str, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        kind = CATALOG[code]  # an unknown code is a bug: fail loudly, in tests
        self._render = message if callable(message) else None
        self.message: str = message(_same) if callable(message) else message
        super().__init__(self.message)
        self.code = code
        self.status = kind.status
        self.type = kind.type
        self.param = param if param is not None else kind.param
        self.headers = headers or {}

    def renamed(self, name: Namer) -> APIError:
        """This error with every parameter it names mapped by ``name`` (its param, and the
        names in a message given as a function); the message text is never searched."""
        render = self._render
        text = render(name) if render is not None else self.message
        return APIError(text, code=self.code, param=name(self.param) if self.param else None, headers=self.headers)

    def body(self) -> JsonObject:
        return error_body(self.message, type=self.type, param=self.param, code=self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


class ClientGone(APIError):
    """The client closed the connection before its answer was ready. Nobody reads the body;
    status 499 (nginx's "client closed request") keeps the request metrics honest."""

    def __init__(self) -> None:
        super().__init__("The client closed the connection.", code="client_closed_request")


def internal_error(exc: BaseException | None = None) -> APIError:
    """The one 500: the same message wherever an unexpected failure is caught (the details go to
    the log, not to the client)."""
    kind = f": {type(exc).__name__}" if exc is not None else ""
    return APIError(f"The server had an error while processing your request{kind}. Retry; if it persists, "
                    "report it with the x-request-id of the response.", code="internal_error")


def error_body(message: str, *, type: str, param: str | None = None, code: str | None = None) -> JsonObject:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str | Callable[[Namer], str], *, code: str, param: str | None = None) -> APIError:
    """A 400 (``code`` must be one of the catalog's 400s)."""
    err = APIError(message, param=param, code=code)
    assert err.status == 400, code
    return err


_TYPE_LABELS = frozenset({"str", "int", "float", "bool", "dict", "list", "none", "json-or-python"})


def _loc_to_param(loc: tuple[int | str, ...]) -> str | None:
    parts: list[str] = []
    for item in loc:
        if item in ("body",) and not parts:
            continue
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif isinstance(item, str) and (item.startswith("function-after") or "[" in item or item.startswith("literal")
                                        or item in _TYPE_LABELS or item[:1].isupper()):
            continue  # pydantic union branch labels (str, int, a model's name), not field names
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or None


def validation_error(errors: Sequence[ErrorDetails]) -> APIError:
    """Turn pydantic errors into one 400 naming the first offending parameter."""
    if not errors:
        return bad_request("Invalid request.", code="invalid_value")
    first = errors[0]
    if first.get("type") == "json_invalid":
        return bad_request(
            "We could not parse the JSON body of your request. Send valid JSON "
            f"({first.get('ctx', {}).get('error', 'invalid JSON')}).",
            code="invalid_json",
        )
    param = _loc_to_param(tuple(first.get("loc", ())))
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if param is None:
        return bad_request(f"Invalid request: {msg}.", code="invalid_value")
    named = param
    if first.get("type") == "missing":
        return bad_request(lambda n: f"Missing required parameter: '{n(named)}'.", param=param,
                           code="missing_required_parameter")
    return bad_request(lambda n: f"Invalid value for '{n(named)}': {msg}.", param=param, code="invalid_value")


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def as_api_error(exc: Exception) -> APIError:
    """An exception, whatever it is, as the API error the client sees (the one mapping every handler uses)."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, (RequestValidationError, ValidationError)):
        return validation_error(list(exc.errors()))
    if isinstance(exc, StarletteHTTPException) and exc.status_code in _HTTP_CODES:
        return APIError(str(exc.detail), code=_HTTP_CODES[exc.status_code], headers=getattr(exc, "headers", None))
    log.error("unhandled error", exc_info=exc)
    return internal_error(exc)


def install_error_handlers(app: FastAPI) -> None:
    """One handler for every exception: :func:`as_api_error`, answered as the envelope."""

    async def _handle(_: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, StarletteHTTPException) and exc.status_code not in _HTTP_CODES:
            # a framework status without a catalogued meaning: its own status, no code
            kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
            return JSONResponse(error_body(str(exc.detail), type=kind), status_code=exc.status_code,
                                headers=getattr(exc, "headers", None))
        return as_api_error(exc).response()

    for kind in (APIError, RequestValidationError, ValidationError, StarletteHTTPException, Exception):
        app.add_exception_handler(kind, _handle)
