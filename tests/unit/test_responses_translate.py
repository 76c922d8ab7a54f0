"""server/responses/translate.py: Responses requests as chat requests, errors renamed back."""
from __future__ import annotations

import pytest

from server.errors import APIError, bad_request
from server.responses.protocol import ResponsesRequest
from server.responses.translate import output_messages, rename_error, to_chat


def plan(**body):
    return to_chat(ResponsesRequest.model_validate(body))


def test_items_become_messages_with_parallel_calls_in_one_turn():
    p = plan(instructions="Be brief.", input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in "}, {"type": "input_text", "text": "Paris?"}]},
        {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call", "call_id": "c2", "name": "w", "arguments": "{\"city\": \"Lyon\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
    ])
    msgs = [m.model_dump(exclude_none=True) for m in p.chat.messages]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool"]
    assert msgs[1]["content"] == "Weather in Paris?"
    assert [c["id"] for c in msgs[2]["tool_calls"]] == ["c1", "c2"]
    assert msgs[4] == {"role": "tool", "tool_call_id": "c2", "content": "rain"}
    assert p.sources == ("instructions", "input[0]", "input[1]", "input[3]", "input[4]")
    assert p.conversation[0]["role"] == "user"  # the instructions are not carried over


def test_tools_formats_and_budget_map_onto_chat():
    p = plan(input="Hi", tools=[{"type": "function", "name": "w", "parameters": {"type": "object"}, "strict": True}],
             tool_choice={"type": "function", "name": "w"}, max_output_tokens=7, reasoning={"effort": "minimal"},
             text={"format": {"type": "json_schema", "name": "p", "strict": True, "schema": {"type": "object"}}})
    c = p.chat
    assert c.tools[0].function.name == "w" and c.tools[0].function.strict is True
    assert c.tool_choice.function.name == "w"
    assert c.max_completion_tokens == 7 and c.reasoning_effort == "none"
    assert c.response_format.type == "json_schema" and c.response_format.json_schema.schema_ == {"type": "object"}
    allowed = plan(input="Hi", tools=[{"type": "function", "name": "w"}],
                   tool_choice={"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "w"}]})
    assert allowed.chat.tool_choice.names() == ["w"] and allowed.chat.tool_choice.allowed_tools.mode == "required"


def test_history_continues_and_its_calls_are_known():
    history = output_messages([{"type": "function_call", "call_id": "c9", "name": "w", "arguments": "{}"}])
    p = to_chat(ResponsesRequest.model_validate({"input": [
        {"type": "function_call_output", "call_id": "c9", "output": "ok"}]}),
        history=[{"role": "user", "content": "Hi"}] + history)
    assert [m.role for m in p.chat.messages] == ["user", "assistant", "tool"]
    assert p.sources[:2] == ("previous_response_id", "previous_response_id")


@pytest.mark.parametrize("body,param", [
    ({"input": [{"type": "nope"}]}, "input[0].type"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "w"}, {"type": "function_call_output",
                                                                          "call_id": "other", "output": "x"}]},
     "input[1].call_id"),
    ({"input": "Hi", "tool_choice": {"type": "web_search"}}, "tool_choice"),
    ({"input": "Hi", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
])
def test_bad_items_name_their_param(body, param):
    with pytest.raises(APIError) as exc:
        plan(**body)
    assert exc.value.param == param and exc.value.status == 400


def test_rename_error_uses_responses_words():
    sources = ("instructions", "input[2]")
    e = rename_error(bad_request(lambda n: f"Invalid '{n('max_completion_tokens')}' for your {n('messages')}.",
                                 param="max_completion_tokens", code="invalid_value"), sources)
    assert e.param == "max_output_tokens" and "'max_output_tokens'" in e.message and "your input" in e.message
    assert e.code == "invalid_value" and e.status == 400

    def param(chat: str) -> str | None:
        return rename_error(bad_request("x", param=chat, code="invalid_value"), sources).param

    assert param("messages[1].content") == "input[2]"
    assert param("messages") == "input"
    assert param("tools[0].function.parameters") == "tools[0].parameters"
    assert param("response_format.json_schema.schema") == "text.format.schema"
    assert param("response_format.type") == "text.format.type"
    assert param("reasoning_effort") == "reasoning.effort"
    assert param("temperature") == "temperature"


def test_rename_error_never_rewrites_message_text():
    """Renaming goes by the map and the message's own namer: plain text stays as written, so
    rewording a chat message cannot break a Responses one."""
    e = rename_error(bad_request("Invalid 'max_completion_tokens' for your messages.", param="max_tokens",
                                 code="invalid_value"), ())
    assert e.message == "Invalid 'max_completion_tokens' for your messages." and e.param == "max_output_tokens"


def test_validation_errors_name_responses_params():
    with pytest.raises(APIError) as exc:  # found by the chat model, named as Responses names it
        plan(input="Hi", tools=[{"type": "function", "name": "bad name!", "parameters": {"type": "object"}}])
    assert exc.value.param == "tools[0].name" and "'tools[0].name'" in exc.value.message


def test_the_budget_floor_error_names_responses_parameters():
    """``check_floor``'s 400 names its parameters through the namer: on Responses, ``max_output_tokens``
    and ``text.format`` in the message and the param; on chat, chat's."""
    from server.structured.budget import check_floor

    class Cache:
        def min_tokens(self, constraint):
            return 28

    class Closing:
        closes = True

    with pytest.raises(APIError) as chat:
        check_floor(Cache(), Closing(), 12, param="max_completion_tokens")  # type: ignore[arg-type]
    assert chat.value.param == "max_completion_tokens" and "'max_completion_tokens' is 12" in chat.value.message
    assert "(response_format," in chat.value.message
    e = rename_error(chat.value, ())
    assert e.param == "max_output_tokens" and e.code == "max_tokens_too_small"
    assert "'max_output_tokens' is 12" in e.message and "Raise 'max_output_tokens' to at least 28" in e.message
    assert "(text.format," in e.message and "max_completion_tokens" not in e.message
