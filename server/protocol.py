"""OpenAI request/response models (pydantic). No engine imports here.

Requests validate ranges the way the OpenAI API documents them, so a bad value is a
400 naming the parameter rather than an engine error later.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from server.json_types import JsonArray, JsonObject, JsonValue

__all__ = [
    "ChatMessage",
    "ChatCompletionRequest",
    "CompletionRequest",
    "StreamOptions",
    "ToolDef",
    "FunctionDef",
    "usage_dict",
    "JsonField",
    "JsonObjectField",
    "JsonArrayField",
]

# Request fields that carry JSON as the client sent it (schemas, tool parameters, arguments, items).
# The type checker sees the JSON types. Pydantic cannot build the recursive alias, and need not: a
# body reaches it from ``json.loads``, so these values are JSON already. It checks the outer shape
# only (an object, a list; anything inside: ``object`` is pydantic's "any value"), so the values
# (not copied), the errors and the OpenAPI schema stay those of an untyped field.
if TYPE_CHECKING:
    JsonField: TypeAlias = JsonValue
    JsonObjectField: TypeAlias = JsonObject
    JsonArrayField: TypeAlias = JsonArray
else:
    JsonField, JsonObjectField, JsonArrayField = object, dict[str, object], list[object]


class _Lenient(BaseModel):
    # Unknown fields are accepted and ignored (clients send vendor extras).
    model_config = ConfigDict(extra="allow")


class ContentPart(_Lenient):
    type: str
    text: str | None = None


class FunctionCall(_Lenient):
    name: str
    arguments: str | JsonObjectField = "{}"


class ToolCall(_Lenient):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ChatMessage:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("messages with role 'tool' must have a 'tool_call_id'")
        if self.role != "assistant" and self.content is None:
            raise ValueError(f"messages with role '{self.role}' must have 'content'")
        if isinstance(self.content, list):
            for part in self.content:
                if part.type != "text":
                    raise ValueError(
                        f"content part type '{part.type}' is not supported by this model; use 'text'"
                    )
        return self


class FunctionDef(_Lenient):
    name: str = Field(pattern=r"^[a-zA-Z0-9_.\-]{1,64}$")
    description: str | None = None
    parameters: JsonObjectField | None = None
    strict: bool | None = None


class CustomToolFormat(_Lenient):
    type: Literal["text", "grammar"] = "text"
    grammar: JsonObjectField | None = None  # {"syntax": "regex" | "lark", "definition": str}


class CustomToolDef(_Lenient):
    name: str = Field(pattern=r"^[a-zA-Z0-9_.\-]{1,64}$")
    description: str | None = None
    format: CustomToolFormat | None = None


def _custom_as_function(custom: CustomToolDef) -> FunctionDef:
    """A custom (free-form input) tool as the function tool the model calls: one string
    ``input``, constrained by the tool's regex. The call is answered in the custom shape."""
    string: JsonObject = {"type": "string"}
    how = "free-form text"
    fmt = custom.format
    if fmt is not None and fmt.type == "grammar":
        grammar = fmt.grammar or {}
        syntax, definition = grammar.get("syntax"), grammar.get("definition")
        if syntax == "lark":
            raise ValueError("a 'lark' grammar cannot be enforced exactly by this server; give the input format as "
                             "a 'regex' grammar, or declare a function tool with a JSON schema")
        if syntax != "regex" or not isinstance(definition, str) or not definition:
            raise ValueError("'format.grammar' needs 'syntax': 'regex' and a non-empty string 'definition'")
        try:
            re.compile(definition)
        except re.error as exc:
            raise ValueError(f"the regex in 'format.grammar.definition' does not compile: {exc}") from None
        string["pattern"] = definition
        how = f"text matching the regex {definition}"
    description = f"{custom.description or ''} (Call it with {{\"input\": <{how}>}}.)".strip()
    return FunctionDef(name=custom.name, description=description, strict=True, parameters={
        "type": "object", "properties": {"input": string}, "required": ["input"], "additionalProperties": False})


class ToolDef(_Lenient):
    type: Literal["function", "custom"]
    function: FunctionDef | None = None
    custom: CustomToolDef | None = None

    @model_validator(mode="after")
    def _shape(self) -> ToolDef:
        if self.type == "custom":
            if self.custom is None:
                raise ValueError("a custom tool needs 'custom': {'name': ..., 'format': ...}")
            self.function = _custom_as_function(self.custom)
        elif self.function is None:
            raise ValueError("a function tool needs 'function': {'name': ..., 'parameters': ...}")
        return self

    def prompt_dict(self) -> JsonObject:
        """The tool as the chat template and the grammar see it (always a function tool)."""
        assert self.function is not None
        return {"type": "function", "function": self.function.model_dump(exclude_none=True, by_alias=True)}


class NamedToolChoiceFunction(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    type: Literal["function"]
    function: NamedToolChoiceFunction


class FunctionCallChoice(_Lenient):
    name: str


class AllowedTool(_Lenient):
    type: Literal["function"] = "function"
    function: NamedToolChoiceFunction | None = None
    name: str | None = None  # the Responses API's flat shape

    @model_validator(mode="after")
    def _named(self) -> AllowedTool:
        if self.function is None and not self.name:
            raise ValueError("each allowed tool needs a 'function': {'name': ...}")
        return self

    @property
    def tool_name(self) -> str:
        return self.function.name if self.function is not None else str(self.name)


class AllowedTools(_Lenient):
    mode: Literal["auto", "required"] = "auto"
    tools: list[AllowedTool] = Field(min_length=1)


class AllowedToolsChoice(_Lenient):
    """Call only these tools (the rest stay in the prompt, e.g. for prompt caching)."""

    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools

    def names(self) -> list[str]:
        return [t.tool_name for t in self.allowed_tools.tools]


class StreamOptions(_Lenient):
    include_usage: bool = False


class JsonSchemaFormat(_Lenient):
    name: str = "response"
    description: str | None = None
    schema_: JsonObjectField | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Lenient):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _check(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format of type 'json_schema' needs 'json_schema' (a name and a schema)")
        return self


class StructuredOutputs(_Lenient):
    json_: JsonObjectField | str | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None


class _SamplingFields(_Lenient):
    model: str | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=16)
    # What vLLM and torch accept (the OpenAI API documents a 64-bit integer).
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    stop: str | list[str] | None = None
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    stream: bool = Field(default=False, strict=True)  # "yes" is not a boolean
    stream_options: StreamOptions | None = None
    user: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    ignore_eos: bool = False
    logit_bias: dict[str, float] | None = None  # token id (as a string) -> bias in [-100, 100]
    # Budget-aware closing (docs/schema_support.md): None = the default (on for strict json_schema
    # and required / named tool calls), true = also for any other constraint, false = off.
    close_within_budget: bool | None = Field(default=None, strict=True)

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v is None:
            return v
        if len(v) > 1024:
            raise ValueError("at most 1024 token ids may be biased")
        for key, bias in v.items():
            if not key.strip().lstrip("-").isdigit():
                raise ValueError(f"keys must be token ids (integers as strings), got {key!r}")
            if not -100 <= bias <= 100:
                raise ValueError(f"biases must lie in [-100, 100], got {bias} for token {key}")
        return v

    def logit_bias_ids(self, vocab_size: int) -> tuple[tuple[int, float], ...]:
        """The biases by token id; ValueError naming an id outside the vocabulary."""
        out = []
        for key, bias in (self.logit_bias or {}).items():
            token = int(key)
            if not 0 <= token < vocab_size:
                raise ValueError(f"token id {token} is outside this model's vocabulary (0..{vocab_size - 1})")
            out.append((token, float(bias)))
        return tuple(out)

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 4:
            raise ValueError("at most 4 stop sequences are allowed")
        if v == "" or (isinstance(v, list) and any(not s for s in v)):
            raise ValueError("stop sequences must be non-empty strings")
        if any(len(s) > 1024 for s in ([v] if isinstance(v, str) else v or [])):
            raise ValueError("a stop sequence may be at most 1024 characters")
        return v

    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | AllowedToolsChoice | None = None
    # The legacy function-calling API: mapped onto tools (one call at most), answered with
    # message.function_call and finish_reason "function_call" as that API did.
    functions: list[FunctionDef] | None = None
    function_call: Literal["none", "auto"] | FunctionCallChoice | None = None
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    chat_template_kwargs: JsonObjectField | None = None
    reasoning_effort: str | None = None
    max_reasoning_tokens: int | None = Field(default=None, ge=0)
    thinking_token_budget: int | None = Field(default=None, ge=0)  # vLLM's name for the same cap

    @field_validator("top_logprobs")
    @classmethod
    def _top_logprobs(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v is not None and not info.data.get("logprobs"):
            raise ValueError("'top_logprobs' requires 'logprobs' to be true")
        return v

    @field_validator("tools")
    @classmethod
    def _tools(cls, v: list[ToolDef] | None) -> list[ToolDef] | None:
        if v is not None:
            names = [t.function.name for t in v if t.function is not None]  # set for every tool by _shape
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"tool names must be unique; repeated: {', '.join(dupes)}")
        return v

    @field_validator("messages")
    @classmethod
    def _tool_results_answer_calls(cls, v: list[ChatMessage]) -> list[ChatMessage]:
        """A tool result must answer a call an earlier assistant message made (when ids are given)."""
        seen: set[str] = set()
        calls = 0
        for i, m in enumerate(v):
            for call in m.tool_calls or ():
                calls += 1
                if call.id:
                    seen.add(call.id)
            if m.role == "tool" and not calls:
                raise ValueError(f"messages[{i}] is a tool result, but no earlier assistant message has 'tool_calls'")
            if m.role == "tool" and seen and m.tool_call_id not in seen:
                raise ValueError(
                    f"messages[{i}] answers tool_call_id {m.tool_call_id!r}, which no earlier assistant "
                    "tool call has; send the assistant message with that call first"
                )
        return v

    @model_validator(mode="before")
    @classmethod
    def _legacy_messages(cls, data: Any) -> Any:
        """Legacy history: an assistant ``function_call`` becomes a tool call with an id, and a
        ``function`` message its tool result (answering the latest call of that name)."""
        messages = data.get("messages") if isinstance(data, dict) else None
        if not isinstance(messages, list) or not any(
                isinstance(m, dict) and (m.get("role") == "function" or m.get("function_call")) for m in messages):
            return data
        out, last_id = [], {}
        for i, m in enumerate(messages):
            if isinstance(m, dict) and m.get("role") == "assistant" and isinstance(m.get("function_call"), dict):
                call_id = f"call_legacy_{i}"
                last_id[m["function_call"].get("name")] = call_id
                m = {k: v for k, v in m.items() if k != "function_call"}
                m["tool_calls"] = [{"id": call_id, "type": "function", "function": messages[i]["function_call"]}]
            elif isinstance(m, dict) and m.get("role") == "function":
                m = {**m, "role": "tool", "tool_call_id": last_id.get(m.get("name"), "")}
            out.append(m)
        return {**data, "messages": out}

    @model_validator(mode="after")
    def _legacy_functions(self) -> ChatCompletionRequest:
        if self.functions is None:
            if self.function_call is not None:
                raise ValueError("'function_call' needs 'functions'")
            return self
        if self.tools is not None or self.tool_choice is not None:
            raise ValueError("send either 'tools' / 'tool_choice' or the legacy 'functions' / 'function_call', not both")
        names = [f.name for f in self.functions]
        if len(set(names)) != len(names):
            raise ValueError("function names must be unique")
        self.tools = [ToolDef(type="function", function=f) for f in self.functions]
        fc = self.function_call
        if isinstance(fc, FunctionCallChoice):
            self.tool_choice = NamedToolChoice(type="function", function=NamedToolChoiceFunction(name=fc.name))
        else:
            self.tool_choice = fc
        self.parallel_tool_calls = False
        return self

    @model_validator(mode="after")
    def _alias_budget(self) -> ChatCompletionRequest:
        if self.max_reasoning_tokens is None and self.thinking_token_budget is not None:
            self.max_reasoning_tokens = self.thinking_token_budget
        return self

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens



class CompletionRequest(_SamplingFields):
    prompt: str | list[str] | list[int] = Field()
    max_tokens: int | None = Field(default=16, ge=1)
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False
    suffix: str | None = None  # refused below: no fill-in-the-middle template
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, v: str | list[str] | list[int]) -> str | list[str] | list[int]:
        if isinstance(v, list) and len(v) == 0:
            raise ValueError("prompt must not be empty")
        if isinstance(v, str) and v == "":
            raise ValueError("prompt must not be empty")
        if isinstance(v, list) and any(isinstance(p, str) and p == "" for p in v):
            raise ValueError("prompt must not contain an empty string")
        if isinstance(v, list) and any(isinstance(p, int) and p < 0 for p in v):
            raise ValueError("token ids must be non-negative")
        return v

    @field_validator("suffix")
    @classmethod
    def _suffix(cls, v: str | None) -> str | None:
        if v:
            raise ValueError("this model has no fill-in-the-middle support; remove 'suffix'")
        return v


def usage_dict(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int | None = None) -> JsonObject:
    usage: JsonObject = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return usage
