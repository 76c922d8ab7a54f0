"""Schemathesis fuzzing of the HTTP API, over ASGI, against the FakeEngine app (no model process).

Schemathesis reads ``/openapi.json`` (request bodies from the pydantic models, documented 200s
and error envelopes: server/routes/_body.py), generates valid and invalid requests for each
operation and checks every answer: no 5xx, a documented status, a documented content type and
a body that fits the documented schema (the OpenAI error envelope for every 4xx). Bounded and
seeded so it is reproducible and quick.
"""
from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

OPERATIONS = [
    "POST /v1/chat/completions",
    "POST /v1/completions",
    "POST /v1/schemas/check",
    "GET /v1/models",
    "GET /health",
]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
CONFIG = {
    "seed": 20250101,
    "generation": {"max-examples": 60, "deterministic": True, "database": "none", "mode": "all"},
}


def _schema() -> Any:
    """The schema, read from /openapi.json of an app like make_app's (it is needed at collection
    time, before fixtures exist; the requests go to make_app's app, which serves the same document)."""
    from server.api.app import create_app
    from server.config import Settings
    from server.engine.fake import FakeEngine
    from server.state import ServerState

    app = create_app(ServerState(settings=Settings(), engine=FakeEngine(), renderer=None, grammar_cache=None))
    return schemathesis.openapi.from_asgi("/openapi.json", app, config=SchemathesisConfig.from_dict(CONFIG))


# (schemathesis.pytest.from_fixture would load it from make_app directly, but schemathesis 4.32
# reads Node._nodeid, which pytest 9 no longer has.)
schema = _schema().include(name=OPERATIONS)


@pytest.fixture
def fuzz_app(make_app: Any) -> Any:
    built = make_app()
    assert built.client().get("/openapi.json").json() == schema.raw_schema  # fuzzing what it serves
    return built.app


def _past_message_checks(case: Any) -> None:
    """Random chat messages that fit the schema mostly fail the cross-field checks of
    ChatMessage (a tool result needs an earlier call, a user message needs content, parts must be
    text), so almost no fuzzed chat reaches generation. For valid (positive) cases only, turn
    such messages into plain ones; every other field stays as generated."""
    if case.operation.label != "POST /v1/chat/completions" or case.meta is None \
            or case.meta.generation.mode.value != "positive" or not isinstance(case.body, dict):
        return
    for m in case.body.get("messages") or ():
        if m.get("role") == "tool":
            m["role"] = "user"
        if m.get("role") != "assistant" and m.get("content") is None:
            m["content"] = "Hi"
        for part in m["content"] if isinstance(m.get("content"), list) else ():
            if isinstance(part, dict):
                part["type"] = "text"


@schema.parametrize()
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # one app per operation, on purpose
def test_api_conforms_to_its_openapi(case: Any, fuzz_app: Any) -> None:
    _past_message_checks(case)
    case.call_and_validate(app=fuzz_app, checks=CHECKS)


def test_openapi_documents_the_raw_body_routes(make_app: Any) -> None:
    doc = make_app().client().get("/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    components = doc["components"]["schemas"]
    for path, model in [("/v1/chat/completions", "ChatCompletionRequest"), ("/v1/completions", "CompletionRequest"),
                        ("/v1/schemas/check", None)]:
        op = doc["paths"][path]["post"]
        body = op["requestBody"]
        assert body["required"] is True
        schema_ = body["content"]["application/json"]["schema"]
        if model:
            assert schema_ == {"$ref": f"#/components/schemas/{model}"}
            assert model in components
        for status in ("400", "401", "404", "413", "429", "431", "499", "503"):
            assert op["responses"][status]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorResponse"}
        assert "application/json" in op["responses"]["200"]["content"]
        assert ("text/event-stream" in op["responses"]["200"]["content"]) == (model is not None)
    assert {"ChatMessage", "ToolDef", "ResponseFormat", "ErrorResponse"} <= set(components)
    text = str(doc)
    assert "#/$defs/" not in text and "'$defs'" not in text
