"""Reading a JSON request body with OpenAI-style errors for every way it can be wrong."""
from __future__ import annotations

import json
import re
from typing import TypeVar

from fastapi import FastAPI, Request
from pydantic import BaseModel, ValidationError

from server.errors import bad_request, validation_error
from server.json_types import JsonObject, JsonValue

__all__ = ["BodySchemasApp", "completion_docs", "json_body_docs", "parse_body", "read_json"]

M = TypeVar("M", bound=BaseModel)

# A \uD800-\uDFFF escape: JSON allows it, but a lone surrogate is not text and fails later
# wherever the string is encoded (tokenizer, logs, the response).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


async def read_json(request: Request) -> JsonValue:
    """The body as JSON; 400 for empty, malformed, too deeply nested or non-text bodies."""
    raw = await request.body()
    if not raw.strip():
        raise bad_request("The request body is empty; send a JSON object.", code="invalid_json")
    try:
        data: JsonValue = json.loads(raw)
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


# --------------------------------------------------------------------------- OpenAPI

# These routes read the raw Request, so FastAPI cannot see their bodies; json_body_docs()
# describes them in /openapi.json instead and BodySchemasApp.openapi() publishes the
# pydantic $defs they refer to under components/schemas.
_REF = "#/components/schemas/{model}"
_COMPONENTS: JsonObject = {
    "ErrorResponse": {
        "type": "object", "required": ["error"], "title": "ErrorResponse",
        "properties": {"error": {
            "type": "object", "required": ["message", "type", "param", "code"],
            "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                           "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}},
    },
}
# Each event's data is a JSON chunk (or error envelope), then the literal [DONE].
_SSE_EVENT: JsonObject = {"type": "object", "required": ["data"],
              "properties": {"event": {"const": "message"}, "data": {"type": "string", "minLength": 1}}}
_ERRORS = {
    "400": "Invalid request (malformed JSON, a bad or missing parameter, a schema that cannot be enforced).",
    "401": "Missing or wrong API key.",
    "404": "The requested model is not served here.",
    "413": "Request body too large.",
    "429": "Too many concurrent requests.",
    "431": "Request headers too large.",
    "499": "The client closed the connection.",
    "503": "Draining, or the engine is not running.",
}


def json_body_docs(body: type[BaseModel] | JsonObject, ok: JsonObject, examples: JsonObject, *,
                   stream: bool = False) -> JsonObject:
    """``openapi_extra`` for a route that reads its JSON body itself: the required request body
    (``body``: a pydantic model or a JSON Schema; ``examples``: name -> request), the 200 answer
    (``ok``; plus text/event-stream when ``stream``) and the error envelope for every error status."""
    schema: JsonObject
    if isinstance(body, dict):
        schema = body
    else:
        definition = body.model_json_schema(ref_template=_REF)
        _COMPONENTS.update(definition.pop("$defs", {}))
        _COMPONENTS[body.__name__] = definition
        schema = {"$ref": _REF.format(model=body.__name__)}
    content: JsonObject = {"application/json": {"schema": ok}}
    if stream:
        content["text/event-stream"] = {"schema": _SSE_EVENT}  # one event (OpenAPI 3.1: schema = each item)
    error: JsonObject = {"application/json": {"schema": {"$ref": _REF.format(model="ErrorResponse")}}}
    responses: JsonObject = {"200": {"description": "Successful Response", "content": content}}
    responses.update({status: {"description": text, "content": error} for status, text in _ERRORS.items()})
    request: JsonObject = {"schema": schema, "examples": {name: {"value": value} for name, value in examples.items()}}
    return {"requestBody": {"required": True, "content": {"application/json": request}}, "responses": responses}


def completion_docs(body: type[BaseModel], object_name: str, choice: JsonObject,
                    examples: JsonObject) -> JsonObject:
    """json_body_docs() for a generation route: its 200 JSON is an ``object_name`` with these choices."""
    count: JsonObject = {"type": "integer", "minimum": 0}
    ok: JsonObject = {"type": "object", "required": ["id", "object", "created", "model", "choices", "usage"],
          "properties": {"id": {"type": "string"}, "object": {"const": object_name}, "created": {"type": "integer"},
                         "model": {"type": "string"},
                         "choices": {"type": "array", "items": {
                             "type": "object", "required": ["index", "finish_reason", *choice],
                             "properties": {"index": count, "finish_reason": {"type": "string"}, **choice}}},
                         "usage": {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
                                   "properties": {"prompt_tokens": count, "completion_tokens": count,
                                                  "total_tokens": count}}}}
    return json_body_docs(body, ok, examples, stream=True)


class BodySchemasApp(FastAPI):
    """A FastAPI app whose ``openapi()`` includes the schemas json_body_docs() refers to."""

    def openapi(self) -> JsonObject:
        doc = super().openapi()
        doc.setdefault("components", {}).setdefault("schemas", {}).update(_COMPONENTS)
        return doc
