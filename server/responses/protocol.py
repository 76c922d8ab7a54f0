"""The ``POST /v1/responses`` request body (pydantic). Items and tools are checked in
:mod:`server.responses.translate`, where each error can name its exact ``param``."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from server.protocol import JsonArrayField, JsonField, JsonObjectField

__all__ = ["ResponsesRequest", "IGNORED_FIELDS"]

# Accepted so clients that send them work, and without effect here (README: "Accepted but ignored").
IGNORED_FIELDS = ("service_tier", "prompt_cache_key", "prompt_cache_retention", "safety_identifier", "user",
                  "truncation", "include", "stream_options", "top_logprobs", "max_tool_calls")


class ResponsesRequest(BaseModel):
    # Unknown fields are accepted and ignored (clients send vendor extras).
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    input: str | JsonArrayField = Field(default="")
    instructions: str | None = None
    tools: list[JsonObjectField] | None = None
    tool_choice: str | JsonObjectField | None = None
    parallel_tool_calls: bool = True
    text: JsonObjectField | None = None
    reasoning: JsonObjectField | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stream: bool = Field(default=False, strict=True)
    store: bool = True
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    background: bool = False
    conversation: JsonField = None
    truncation: Literal["auto", "disabled"] | None = None
    # vLLM-style extras, as on chat
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    ignore_eos: bool = False
    close_within_budget: bool | None = Field(default=None, strict=True)  # budget-aware closing, as on chat
    chat_template_kwargs: JsonObjectField | None = None
