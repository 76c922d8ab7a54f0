"""Reading a JSON request body with OpenAI-style errors for every way it can be wrong."""
from __future__ import annotations

import json
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from ..errors import bad_request, validation_error

__all__ = ["parse_body"]

M = TypeVar("M", bound=BaseModel)


async def parse_body(request: Request, model: type[M]) -> M:
    raw = await request.body()
    if not raw.strip():
        raise bad_request("The request body is empty; send a JSON object.", code="invalid_json")
    try:
        data: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"We could not parse the JSON body of your request ({exc}). Send valid JSON.",
                          code="invalid_json") from exc
    if not isinstance(data, dict):
        raise bad_request("The request body must be a JSON object.", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(list(exc.errors())) from exc
