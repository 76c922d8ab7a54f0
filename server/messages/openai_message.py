"""The OpenAI JSON of a parsed answer: the assistant message, and the ``delta`` bodies a
stream sends. The chat service and ``gramserve parse`` both build their JSON here, so an
answer replayed offline is the answer the server gives, key for key.

Function tool calls only: the server wraps these for the legacy ``functions`` API and for
custom tools (``server/plan/chat_frames.py``).
"""
from __future__ import annotations

from server.json_types import JsonArray, JsonObject
from server.messages.message_stream import FinalMessage, FinalToolCall, MessageDelta, ToolCallDelta

__all__ = ["REASONING_FIELDS", "reasoning_fields", "function_call", "assistant_message", "text_delta",
           "call_delta", "delta_bodies", "opening", "finish_reason"]

REASONING_FIELDS = ("reasoning_content", "reasoning", "both")  # --reasoning-field


def reasoning_fields(text: str | None, *, field: str | None) -> JsonObject:
    """Reasoning under the field(s) ``--reasoning-field`` names; none at all (``field`` None)
    when the server runs no reasoning parser."""
    if field is None:
        return {}
    out: JsonObject = {}
    if field in ("reasoning_content", "both"):
        out["reasoning_content"] = text
    if field in ("reasoning", "both"):
        out["reasoning"] = text
    return out


def function_call(call: FinalToolCall) -> JsonObject:
    """One ``message.tool_calls[]`` entry."""
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def assistant_message(final: FinalMessage, *, reasoning_field: str | None, calls: JsonArray | None = None,
                      legacy: bool = False) -> JsonObject:
    """``choices[i].message``. ``calls``: the calls' JSON when the caller shapes them (custom
    tools); ``legacy``: the ``functions`` API (one call, as ``function_call``)."""
    if calls is None:
        calls = [function_call(c) for c in final.tool_calls]
    # OpenAI: content is null beside tool calls unless text came before them; "" for an empty answer.
    msg: JsonObject = {"role": "assistant", "content": final.content or (None if calls else "")}
    msg.update(reasoning_fields(final.reasoning, field=reasoning_field))
    if legacy:
        if calls:
            first = calls[0]
            assert isinstance(first, dict)  # a call object
            msg["function_call"] = first["function"]
    else:
        msg["tool_calls"] = calls or None
    msg["refusal"] = None
    return msg


def text_delta(delta: MessageDelta, *, reasoning_field: str | None) -> JsonObject:
    """The reasoning and content a delta adds, as one body ({} when it adds none)."""
    body: JsonObject = {}
    if delta.reasoning:
        body.update(reasoning_fields(delta.reasoning, field=reasoning_field))
    if delta.content:
        body["content"] = delta.content
    return body


def call_delta(tc: ToolCallDelta) -> JsonObject:
    """One ``delta.tool_calls[]`` entry: a call's header (id, type, name, ``arguments: ""``),
    or a fragment of its arguments."""
    if tc.name is not None:
        return {"index": tc.index, "id": tc.id, "type": "function",
                "function": {"name": tc.name, "arguments": tc.arguments}}
    return {"index": tc.index, "function": {"arguments": tc.arguments}}


def delta_bodies(delta: MessageDelta | None, *, reasoning_field: str | None) -> list[JsonObject]:
    """The bodies one delta is sent as: its text first, then one per tool-call entry (a header
    alone, as OpenAI streams it)."""
    if delta is None:
        return []
    text = text_delta(delta, reasoning_field=reasoning_field)
    return ([text] if text else []) + [{"tool_calls": [call_delta(tc)]} for tc in delta.tool_calls]


def opening(body: JsonObject | None) -> list[JsonObject]:
    """A choice's first bodies: OpenAI opens with the role, content null when the answer starts
    with a tool call (merged into that body), "" otherwise."""
    if body is not None and ("tool_calls" in body or "function_call" in body):
        return [{"role": "assistant", "content": None, **body}]
    role: JsonObject = {"role": "assistant", "content": ""}
    return [role] + ([body] if body is not None else [])


def finish_reason(final: FinalMessage, *, length: bool = False, legacy: bool = False) -> str:
    """The one rule, streamed or not: ``length`` when the token budget cut the answer (calls
    completed before it still return); ``tool_calls`` (``function_call`` for the legacy API)
    when every returned call is complete; ``stop`` otherwise: no calls, or a call the output
    ended inside or whose arguments broke (``final.unfinished``), so a client that runs calls
    on ``tool_calls`` never runs a half-written one (docs/tool_calling.md)."""
    if length:
        return "length"
    if not final.tool_calls or final.unfinished:
        return "stop"
    return "function_call" if legacy else "tool_calls"
