"""One OpenAI error envelope for everything: ``{"error": {message, type, param, code}}``.

Every failure the server can name is an :class:`APIError` with the HTTP status the
OpenAI API uses for it; handlers installed by :func:`install_error_handlers` turn
these, pydantic validation errors, malformed JSON and unexpected exceptions into that
envelope, so clients (and the OpenAI SDK's exception classes) always see the same shape.
"""
from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

__all__ = [
    "APIError",
    "ClientGone",
    "internal_error",
    "bad_request",
    "error_body",
    "install_error_handlers",
    "validation_error",
]

log = logging.getLogger("gramserve.errors")


class APIError(Exception):
    """An error with an OpenAI-style body and an HTTP status."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, param=self.param, code=self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


class ClientGone(APIError):
    """The client closed the connection before its answer was ready. Nobody reads the body;
    status 499 (nginx's "client closed request") keeps the request metrics honest."""

    def __init__(self) -> None:
        super().__init__("The client closed the connection.", status=499, code="client_closed_request")


def internal_error(exc: BaseException | None = None) -> APIError:
    """The one 500: the same message wherever an unexpected failure is caught (the details go to
    the log, not to the client)."""
    kind = f": {type(exc).__name__}" if exc is not None else ""
    return APIError(f"The server had an error while processing your request{kind}. Retry; if it persists, "
                    "report it with the x-request-id of the response.", status=500, type="server_error",
                    code="internal_error")


def error_body(message: str, *, type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(message, status=400, param=param, code=code)


_TYPE_LABELS = frozenset({"str", "int", "float", "bool", "dict", "list", "none", "json-or-python"})


def _loc_to_param(loc: tuple[Any, ...]) -> str | None:
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


def validation_error(errors: list[dict[str, Any]]) -> APIError:
    """Turn pydantic errors into one 400 naming the first offending parameter."""
    if not errors:
        return bad_request("Invalid request.")
    first = errors[0]
    if first.get("type") == "json_invalid":
        return bad_request(
            "We could not parse the JSON body of your request. Send valid JSON "
            f"({first.get('ctx', {}).get('error', 'invalid JSON')}).",
            code="invalid_json",
        )
    param = _loc_to_param(tuple(first.get("loc", ())))
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if first.get("type") == "missing":
        msg = f"Missing required parameter: '{param}'."
        return bad_request(msg, param=param, code="missing_required_parameter")
    text = f"Invalid value for '{param}': {msg}." if param else f"Invalid request: {msg}."
    return bad_request(text, param=param, code="invalid_value")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _request_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(list(exc.errors())).response()

    @app.exception_handler(ValidationError)
    async def _validation(_: Request, exc: ValidationError) -> JSONResponse:
        return validation_error(list(exc.errors())).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return JSONResponse(
            error_body(str(exc.detail), type=kind, code=code),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return internal_error(exc).response()
