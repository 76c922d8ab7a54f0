"""Reading a JSON request body with OpenAI-style errors for every way it can be wrong."""
from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from ..errors import bad_request, validation_error

__all__ = ["parse_body", "read_json"]

M = TypeVar("M", bound=BaseModel)

# A \uD800-\uDFFF escape: JSON allows it, but a lone surrogate is not text and fails later
# wherever the string is encoded (tokenizer, logs, the response).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


async def read_json(request: Request) -> Any:
    """The body as JSON; 400 for empty, malformed, too deeply nested or non-text bodies."""
    raw = await request.body()
    if not raw.strip():
        raise bad_request("The request body is empty; send a JSON object.", code="invalid_json")
    try:
        data: Any = json.loads(raw)
    except RecursionError:
        raise bad_request("The JSON body is nested too deeply; flatten it.", code="invalid_json") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"We could not parse the JSON body of your request ({exc}). Send valid JSON.",
                          code="invalid_json") from exc
    if _SURROGATE_ESCAPE.search(raw):
        try:
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise bad_request("The JSON body contains a lone UTF-16 surrogate (e.g. \"\\ud800\"), which is not "
                              "text; send valid Unicode.", code="invalid_json") from None
    return data


async def parse_body(request: Request, model: type[M]) -> M:
    data = await read_json(request)
    if not isinstance(data, dict):
        raise bad_request("The request body must be a JSON object.", code="invalid_json")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(list(exc.errors())) from exc
    except RecursionError:
        raise bad_request("The JSON body is nested too deeply; flatten it.", code="invalid_json") from None
