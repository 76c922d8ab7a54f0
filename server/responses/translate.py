"""A Responses request as the chat request it means, and chat errors named in Responses terms.

Responses and chat differ in shape only: ``input`` items are messages, ``function_call`` and
``function_call_output`` items are assistant tool calls and tool results, tools are flat,
``text.format`` is ``response_format`` and ``max_output_tokens`` is ``max_completion_tokens``.
Translating lets one request plan (prompt, constraint, parsers) serve both APIs.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from server.errors import APIError, bad_request, validation_error
from server.json_types import JsonArray, JsonObject, JsonValue
from server.protocol import ChatCompletionRequest
from server.responses.protocol import ResponsesRequest

__all__ = ["ChatPlan", "to_chat", "input_items", "output_messages", "rename_error"]

_TEXT_PARTS = ("input_text", "output_text", "text", "refusal")
_ROLES = ("user", "system", "developer", "assistant")


@dataclass(frozen=True)
class ChatPlan:
    """The chat request, the conversation it continues (chat messages, instructions excluded,
    for the store) and where each chat message came from (for error params)."""

    chat: ChatCompletionRequest
    conversation: tuple[JsonObject, ...]
    sources: tuple[str, ...]  # per chat message: "instructions", "previous_response_id" or "input[i]"


def input_items(value: str | JsonArray) -> JsonArray:
    """``input`` as a list of items (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value)


def _text(content: JsonValue, *, param: str) -> str:
    """A message's text: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"'{param}' must be a string or a list of content parts.", param=param,
                          code="invalid_type")
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        text = part.get("text", part.get("refusal")) if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(text, str):
            out.append(text)
        elif kind in ("input_image", "input_file", "input_audio"):
            raise bad_request(f"'{param}[{j}]' is an {kind} part; this server's model reads text only. Send the "
                              "content as input_text.", param=f"{param}[{j}]", code="unsupported_content")
        else:
            raise bad_request(f"'{param}[{j}]' must be a content part with a 'type' of input_text or output_text "
                              "and a string 'text'.", param=f"{param}[{j}]", code="invalid_value")
    return "".join(out)


def _messages(items: Sequence[JsonValue], *, known_calls: set[str]) -> tuple[list[JsonObject], list[str]]:
    """Chat messages for input items, with each one's source param."""
    messages: list[JsonObject] = []
    sources: list[str] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"'{where}' must be an object (a message or an item).", param=where, code="invalid_type")
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in _ROLES:
                raise bad_request(f"'{where}.role' must be one of {', '.join(_ROLES)}; got {role!r}.",
                                  param=f"{where}.role", code="invalid_value")
            messages.append({"role": role, "content": _text(item.get("content"), param=f"{where}.content")})
            sources.append(where)
        elif kind in ("function_call", "custom_tool_call"):
            field = "arguments" if kind == "function_call" else "input"
            call_id, name, args = item.get("call_id"), item.get("name"), item.get(field, "{}")
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not isinstance(args, str):
                raise bad_request(f"'{where}' is a {kind} item: it needs a string 'call_id', 'name' and "
                                  f"'{field}'.", param=where, code="invalid_value")
            if kind == "custom_tool_call":  # made by the model as {"input": ...} (server.chat.custom_tools)
                args = json.dumps({"input": args}, ensure_ascii=False)
            known_calls.add(call_id)
            call: JsonObject = {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and sources[-1] != "previous_response_id":
                calls = last.setdefault("tool_calls", [])  # parallel calls: one assistant turn
                assert isinstance(calls, list)  # (this loop's own message: none, or the list it made)
                calls.append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
                sources.append(where)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or call_id not in known_calls:
                raise bad_request(f"'{where}.call_id' is {call_id!r}, which no function_call item before it (or in "
                                  "the previous response) has; send the function_call item first.",
                                  param=f"{where}.call_id", code="invalid_value")
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, param=f"{where}.output")
            messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
            sources.append(where)
        elif kind == "reasoning":
            continue  # earlier turns' thinking is not shown to the model again (as chat templates do)
        elif kind == "item_reference":
            raise bad_request(f"'{where}' is an item_reference; send the item itself, or continue with "
                              "'previous_response_id'.", param=f"{where}.type", code="unsupported_item")
        else:
            raise bad_request(f"'{where}.type' is {kind!r}; this server accepts message, function_call, "
                              "function_call_output, custom_tool_call, custom_tool_call_output and reasoning items.",
                              param=f"{where}.type",
                              code="invalid_value")
    return messages, sources


def _tool(tool: JsonObject, i: int) -> JsonObject:
    where = f"tools[{i}]"
    kind = tool.get("type")
    if kind == "custom":
        fmt = tool.get("format") or {"type": "text"}
        if isinstance(fmt, dict) and fmt.get("type") == "grammar":  # flat in Responses, nested in chat
            fmt = {"type": "grammar", "grammar": {"syntax": fmt.get("syntax"), "definition": fmt.get("definition")}}
        return {"type": "custom", "custom": {k: v for k, v in (("name", tool.get("name")), ("format", fmt),
                                                                  ("description", tool.get("description"))) if v}}
    if kind != "function":
        raise bad_request(f"'{where}.type' is {kind!r}; this server runs no hosted tools. Declare a function tool "
                          "({\"type\": \"function\", \"name\": ..., \"parameters\": {...}}) and run it yourself.",
                          param=f"{where}.type", code="unsupported_tool")
    fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
    return {"type": "function", "function": fn}


def _tool_choice(choice: str | JsonObject | None) -> JsonValue:
    if choice is None or isinstance(choice, str):
        return choice
    kind = choice.get("type")
    if kind == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    if kind == "allowed_tools":
        return {"type": "allowed_tools", "allowed_tools": {"mode": choice.get("mode", "auto"),
                                                           "tools": choice.get("tools")}}
    raise bad_request(f"'tool_choice.type' is {kind!r}; use \"function\" (with 'name') or \"allowed_tools\", or "
                      "one of \"auto\", \"none\", \"required\".", param="tool_choice", code="invalid_value")


def _response_format(text: JsonObject | None) -> JsonObject | None:
    fmt = (text or {}).get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise bad_request("'text.format.type' must be one of text, json_object, json_schema.",
                          param="text.format.type", code="invalid_value")
    if fmt["type"] != "json_schema":
        return {"type": fmt["type"]}
    spec = {k: fmt[k] for k in ("name", "description", "schema", "strict") if fmt.get(k) is not None}
    return {"type": "json_schema", "json_schema": spec}


def to_chat(req: ResponsesRequest, *, history: Sequence[JsonObject] = ()) -> ChatPlan:
    """The chat request for ``req``, continuing ``history`` (a stored conversation)."""
    if req.background:
        raise bad_request("'background' responses are not supported; send the request without it (use 'stream' "
                          "to see progress).", param="background", code="unsupported_parameter")
    if req.conversation is not None:
        raise bad_request("'conversation' objects are not supported; continue with 'previous_response_id'.",
                          param="conversation", code="unsupported_parameter")
    known = {call_id for m in history for call_id in _call_ids(m)}
    items = input_items(req.input)
    if not items and not history:
        raise bad_request("'input' is empty; send a string or at least one item.", param="input",
                          code="missing_required_parameter")
    new, new_sources = _messages(items, known_calls=known)
    conversation = [dict(m) for m in history] + new
    sources = ["previous_response_id"] * len(history) + new_sources
    messages: JsonArray = list(conversation)
    if req.instructions:  # instructions apply to this request only (OpenAI: not carried over)
        messages.insert(0, {"role": "system", "content": req.instructions})
        sources.insert(0, "instructions")
    body: JsonObject = {
        "model": req.model, "messages": messages, "stream": req.stream,
        "tools": [_tool(t, i) for i, t in enumerate(req.tools)] if req.tools else None,
        "tool_choice": _tool_choice(req.tool_choice), "parallel_tool_calls": req.parallel_tool_calls,
        "response_format": _response_format(req.text), "max_completion_tokens": req.max_output_tokens,
        "temperature": req.temperature, "top_p": req.top_p, "seed": req.seed, "ignore_eos": req.ignore_eos,
        "close_within_budget": req.close_within_budget,
        "chat_template_kwargs": req.chat_template_kwargs,
        "reasoning_effort": _effort((req.reasoning or {}).get("effort")),
    }
    try:
        chat = ChatCompletionRequest.model_validate({k: v for k, v in body.items() if v is not None})
    except ValidationError as exc:
        raise rename_error(validation_error(list(exc.errors())), tuple(sources)) from exc
    return ChatPlan(chat=chat, conversation=tuple(conversation), sources=tuple(sources))


def _effort(effort: JsonValue) -> JsonValue:
    # "minimal" thinks as little as the template allows: none where thinking can be switched off
    return "none" if effort == "minimal" else effort


# chat parameter (or its prefix) -> the Responses parameter; the longest prefix wins
_RENAMES = {"max_completion_tokens": "max_output_tokens", "max_tokens": "max_output_tokens",
            "response_format.json_schema": "text.format", "response_format": "text.format",
            "reasoning_effort": "reasoning.effort", "messages": "input"}
_MESSAGE_PARAM = re.compile(r"^messages\[(\d+)\]")
_TOOL_PARAM = re.compile(r"^(tools\[\d+\])\.function")


def responses_name(param: str, sources: Sequence[str]) -> str:
    """A chat parameter's Responses name: ``messages[i]`` is the item it came from, tools are
    flat, and the rest by the :data:`_RENAMES` map."""
    m = _MESSAGE_PARAM.match(param)
    if m and int(m.group(1)) < len(sources):
        return sources[int(m.group(1))]
    param = _TOOL_PARAM.sub(r"\1", param)
    for old in sorted(_RENAMES, key=len, reverse=True):
        if param == old or param.startswith(old + ".") or param.startswith(old + "["):
            return "input" if old == "messages" else _RENAMES[old] + param[len(old):]
    return param


def rename_error(exc: APIError, sources: Sequence[str]) -> APIError:
    """A chat error as the Responses API names things: its param, and the parameters its
    message names (rendered with these names; the message text is never rewritten)."""
    return exc.renamed(lambda param: responses_name(param, sources))


def _call_ids(message: JsonObject) -> list[str]:
    """The ids of a stored chat message's tool calls (the server's own message: a list of calls, or none)."""
    calls = message.get("tool_calls") or []
    assert isinstance(calls, list)
    return [c["id"] for c in calls if isinstance(c, dict) and isinstance(c["id"], str)]


def output_messages(output: Sequence[JsonValue]) -> list[JsonObject]:
    """A response's output items (the server's own) as the chat messages that continue the conversation."""
    content: str | None = None
    calls: JsonArray = []
    for item in output:
        assert isinstance(item, dict)  # an output item object
        if item["type"] == "message":
            parts = item["content"]
            assert isinstance(parts, list)  # output_text parts
            content = (content or "") + "".join(_part_text(p) for p in parts)
        elif item["type"] in ("function_call", "custom_tool_call"):
            args = item["arguments"] if item["type"] == "function_call" else json.dumps({"input": item["input"]},
                                                                                         ensure_ascii=False)
            calls.append(
                {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": args}})
    msg: JsonObject = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = calls
    elif content is None:
        msg["content"] = ""
    return [msg]


def _part_text(part: JsonValue) -> str:
    """An output_text part's text (the server's own part)."""
    text = part.get("text", "") if isinstance(part, dict) else None
    assert isinstance(text, str)  # an output_text part's text
    return text

