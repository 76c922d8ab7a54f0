"""The Responses framer: a plan's run as a Response object (output items) or its events.

The request was translated to chat (:mod:`server.responses.translate`) and planned by
:func:`server.plan.build.build_plan` exactly as chat is, and runs on the one run loop
(:mod:`server.plan.run`), so the prompt, the grammar and the parsers are the ones chat uses;
only the framing differs. Streams follow OpenAI's event sequence:
``response.created``, ``response.in_progress``, per item ``output_item.added`` ... ``done``
(with ``content_part``, ``output_text``, ``reasoning_text`` and ``function_call_arguments``
events inside), then ``response.completed`` (or ``response.incomplete`` when
``max_output_tokens`` ran out), every event with its ``sequence_number``.
"""
from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator

from server.chat.custom_tools import InputStream, custom_input
from server.chat.sse import Events
from server.chat.stream_guard import guarded_stream
from server.errors import APIError, internal_error
from server.ids import new_id
from server.json_types import JsonArray, JsonObject, JsonValue
from server.messages.message_stream import FinalMessage, ToolCallDelta
from server.plan.build import RequestPlan, ResponsesPlan
from server.plan.lanes import ArgumentsFrame, ParsedLane, TextFrame, TextLane
from server.plan.run import ChoiceUpdate, Run
from server.responses.protocol import ResponsesRequest
from server.responses.store import ResponseStore, StoredResponse
from server.responses.translate import input_items, output_messages
from server.state import ServerState
from server.structured.budget import CLOSED_BY_BUDGET

__all__ = ["response_body", "response_stream"]

QUIET = True  # Run.updates(quiet=...): tests turn it off to compare every event with an update per chunk
FAST_PATHS = True  # a message's text lane (Run.text_updates, with QUIET): tests compare it with the general path

log = logging.getLogger("gramserve.responses")


def _responses(plan: RequestPlan) -> ResponsesPlan:
    assert plan.responses is not None, "a Responses framer needs a plan built from a Responses request"
    return plan.responses


def _new_id(prefix: str) -> str:
    return f"{prefix}_{new_id()}"


def _text_format(req: ResponsesRequest) -> JsonValue:
    return (req.text or {}).get("format") or {"type": "text"}


def _usage(chat_usage: JsonObject) -> JsonObject:
    details = chat_usage.get("completion_tokens_details")  # (usage_dict's: an object, or absent)
    reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
    return {
        "input_tokens": chat_usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": chat_usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": reasoning or 0},
        "total_tokens": chat_usage["total_tokens"],
    }


def _response(state: ServerState, pr: ResponsesPlan, *, status: str, output: JsonArray,
              usage: JsonObject | None = None, error: JsonObject | None = None,
              closed_by_budget: bool = False) -> JsonObject:
    body = _body(state, pr, status=status, output=output, usage=usage, error=error)
    if closed_by_budget:  # incomplete by the budget, yet complete and valid (docs/schema_support.md)
        body[CLOSED_BY_BUDGET] = True
    return body


def _body(state: ServerState, pr: ResponsesPlan, *, status: str, output: JsonArray,
          usage: JsonObject | None, error: JsonObject | None) -> JsonObject:
    req = pr.request
    return {
        "id": pr.id, "object": "response", "created_at": pr.created_at, "status": status, "background": False,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": req.instructions, "max_output_tokens": req.max_output_tokens, "max_tool_calls": None,
        "model": state.engine.model_name, "output": output, "parallel_tool_calls": req.parallel_tool_calls,
        "previous_response_id": req.previous_response_id,
        "reasoning": {"effort": (req.reasoning or {}).get("effort"), "summary": None},
        "service_tier": "default", "store": req.store,
        "temperature": 1.0 if req.temperature is None else req.temperature,
        "text": {"format": _text_format(req), "verbosity": "medium"},
        "tool_choice": req.tool_choice or "auto", "tools": list(req.tools or ()),
        "top_logprobs": 0, "top_p": 1.0 if req.top_p is None else req.top_p, "truncation": "disabled",
        "usage": usage, "user": None, "metadata": dict(req.metadata or {}),
    }


def _reasoning_item(item_id: str, text: str, *, status: str) -> JsonObject:
    content: JsonArray = [{"type": "reasoning_text", "text": text}] if status == "completed" else []
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "encrypted_content": None,
            "status": status}


def _message_item(item_id: str, text: str | None, *, status: str) -> JsonObject:
    content: JsonArray = [] if text is None else [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": content}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, *, status: str) -> JsonObject:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}


def _custom_item(item_id: str, call_id: str, name: str, text: str, *, status: str) -> JsonObject:
    return {"type": "custom_tool_call", "id": item_id, "call_id": call_id, "name": name, "input": text,
            "status": status}


def _output(final: FinalMessage, *, item_status: str, custom: frozenset[str]) -> JsonArray:
    """Output items for a finished message: reasoning, text, then one item per tool call."""
    out: JsonArray = []
    if final.reasoning:
        out.append(_reasoning_item(_new_id("rs"), final.reasoning, status="completed"))
    if final.content or not final.tool_calls:
        out.append(_message_item(_new_id("msg"), final.content or "", status=item_status))
    for k, c in enumerate(final.tool_calls):
        status = _call_status(final, k)
        if c.name in custom:
            out.append(_custom_item(_new_id("ctc"), c.id, c.name, custom_input(c.arguments), status=status))
        else:
            out.append(_call_item(_new_id("fc"), c.id, c.name, c.arguments, status=status))
    return out


_CALLS = ("function_call", "custom_tool_call")  # the item types of calls


def _call_status(final: FinalMessage, index: int) -> str:
    """A call item's status: ``incomplete`` where the output ended inside the call or its arguments
    broke (``final.unfinished``: the call chat's ``finish_reason`` does not vouch for), else ``completed``."""
    return "incomplete" if index in final.unfinished else "completed"


def _store(store: ResponseStore, pr: ResponsesPlan, body: JsonObject, output: JsonArray) -> None:
    """Keep the answer (``output``: its output items) when the request asked for it."""
    if pr.request.store and body["status"] in ("completed", "incomplete"):
        conversation = pr.chat.conversation + tuple(output_messages(output))
        # the input items (objects: translating the request checked every one)
        items = tuple(item for item in input_items(pr.request.input) if isinstance(item, dict))
        store.put(StoredResponse(body=body, conversation=conversation, input_items=items))


async def response_body(state: ServerState, store: ResponseStore,
                        plan: RequestPlan) -> tuple[JsonObject, dict[str, str]]:
    """The non-streamed Response object, and extra headers."""
    pr = _responses(plan)
    run = Run(state, plan, streaming=False)
    ended = await run.to_end()
    last = ended[-1] if ended else None
    usage = _usage(run.usage())
    if last is None:  # the engine ended without a final chunk: nothing was generated
        raise internal_error()
    status = "incomplete" if last.finish_reason == "length" else "completed"
    assert last.final is not None  # a parsed choice's last update carries its message
    output = _output(last.final, item_status=status, custom=_custom(plan))
    body = _response(state, pr, status=status, output=output, usage=usage, closed_by_budget=last.closed_by_budget)
    _store(store, pr, body, output)
    headers = {"x-gramserve-schema-validated": last.schema_validated} if last.schema_validated else {}
    return body, headers


_JSON_TEXT = json.JSONEncoder(ensure_ascii=False).encode  # a string as _event's json.dumps writes it (one encoder)


def _event(kind: str, seq: int, **fields: JsonValue) -> bytes:
    payload = {"type": kind, "sequence_number": seq, **fields}
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"event: {kind}\ndata: {data}\n\n".encode()


class _Events:
    """Per-stream framing state: the open output item, its text so far, the sequence number."""

    def __init__(self, custom: frozenset[str] = frozenset()) -> None:
        self.custom = custom  # custom tools: their calls stream as decoded input text
        self.input: InputStream | None = None
        self.seq = 0
        self.output: JsonArray = []  # finished items, in output order
        self.open: JsonObject | None = None  # the item being streamed
        self.text = ""  # its text or arguments so far

    def emit(self, kind: str, **fields: JsonValue) -> bytes:
        out = _event(kind, self.seq, **fields)
        self.seq += 1
        return out

    def _index(self) -> int:
        return len(self.output)

    def _start(self, item: JsonObject) -> list[bytes]:
        self.open, self.text = item, ""
        out = [self.emit("response.output_item.added", output_index=self._index(), item=item)]
        if item["type"] in ("message", "reasoning"):
            part: JsonObject = ({"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                                if item["type"] == "message" else {"type": "reasoning_text", "text": ""})
            out.append(self.emit("response.content_part.added", item_id=item["id"], output_index=self._index(),
                                 content_index=0, part=part))
        return out

    def close(self, *, status: str = "completed") -> list[bytes]:
        """End the open item (if any) with ``status`` (a reasoning item: completed): its done events, and
        the item in the output."""
        item, text, i = self.open, self.text, self._index()
        if item is None:
            return []
        self.open = None
        kind, item_id = item["type"], str(item["id"])  # (the items this class starts: string ids and names)
        if kind == "message":
            part: JsonObject = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            done = _message_item(item_id, text, status=status)
            out = [self.emit("response.output_text.done", item_id=item_id, output_index=i, content_index=0,
                             text=text, logprobs=[]),
                   self.emit("response.content_part.done", item_id=item_id, output_index=i, content_index=0,
                             part=part)]
        elif kind == "reasoning":
            done = _reasoning_item(item_id, text, status="completed")
            out = [self.emit("response.reasoning_text.done", item_id=item_id, output_index=i, content_index=0,
                             text=text),
                   self.emit("response.content_part.done", item_id=item_id, output_index=i, content_index=0,
                             part={"type": "reasoning_text", "text": text})]
        elif kind == "custom_tool_call":
            done = _custom_item(item_id, str(item["call_id"]), str(item["name"]), text, status=status)
            out = [self.emit("response.custom_tool_call_input.done", item_id=item_id, output_index=i, input=text)]
        else:
            done = _call_item(item_id, str(item["call_id"]), str(item["name"]), text, status=status)
            out = [self.emit("response.function_call_arguments.done", item_id=item_id, output_index=i,
                             name=item["name"], arguments=text)]
        out.append(self.emit("response.output_item.done", output_index=i, item=done))
        self.output.append(done)
        return out

    def _open_id(self) -> str:
        """The id of the item being streamed (every delta belongs to one)."""
        assert self.open is not None
        return str(self.open["id"])

    def reasoning(self, text: str) -> list[bytes]:
        out = [] if self.open and self.open["type"] == "reasoning" else [
            *self.close(), *self._start(_reasoning_item(_new_id("rs"), "", status="in_progress"))]
        self.text += text
        return out + [self.emit("response.reasoning_text.delta", item_id=self._open_id(), output_index=self._index(),
                                content_index=0, delta=text)]

    def content(self, text: str) -> list[bytes]:
        out = [] if self.open and self.open["type"] == "message" else [
            *self.close(), *self._start(_message_item(_new_id("msg"), None, status="in_progress"))]
        self.text += text
        if text:
            out.append(self.emit("response.output_text.delta", item_id=self._open_id(), output_index=self._index(),
                                 content_index=0, delta=text, logprobs=[]))
        return out

    def _delta_parts(self, kind: str, after: str) -> tuple[bytes, bytes]:
        """A delta event of the open item as two parts encoded once: before its sequence number, and
        from there to its ``delta`` (``after``: the fields between)."""
        head = f'event: {kind}\ndata: {{"type":"{kind}","sequence_number":'.encode()
        mid = (',"item_id":' + json.dumps(self._open_id(), ensure_ascii=False)
               + f',"output_index":{self._index()}{after},"delta":').encode()
        return head, mid

    def text_frame(self) -> TextFrame:
        """A lane's frame of text (server/plan/lanes.py): :meth:`content`'s one delta event for each next
        text of the message item already open, byte for byte, from parts encoded once."""
        assert self.open is not None and self.open["type"] == "message"
        head, mid = self._delta_parts("response.output_text.delta", ',"content_index":0')

        def frame(index: int, text: str) -> bytes:
            self.text += text
            seq, self.seq = self.seq, self.seq + 1
            return head + str(seq).encode() + mid + _JSON_TEXT(text).encode() + b',"logprobs":[]}\n\n'

        return frame

    def arguments_frame(self) -> ArgumentsFrame:
        """A lane's frame of the open function call's next arguments fragment: :meth:`call`'s event for
        it, byte for byte (an empty fragment: no event, as there)."""
        assert self.open is not None and self.open["type"] == "function_call" and self.input is None
        head, mid = self._delta_parts("response.function_call_arguments.delta", "")

        def frame(index: int, call: int, text: str) -> bytes:
            if not text:
                return b""
            self.text += text
            seq, self.seq = self.seq, self.seq + 1
            return head + str(seq).encode() + mid + _JSON_TEXT(text).encode() + b"}\n\n"

        return frame

    def lane_frames(self) -> tuple[TextFrame | None, ArgumentsFrame | None]:
        """A parsed lane's frames for the item open now: its text where it is a message, its arguments
        where it is a function call (the other kind stops the lane, for :meth:`content` or :meth:`call`)."""
        kind = self.open["type"] if self.open is not None else None
        if kind == "message":
            return self.text_frame(), None
        if kind == "function_call" and self.input is None:
            return None, self.arguments_frame()
        return None, None

    def call(self, call: ToolCallDelta) -> list[bytes]:
        out: list[bytes] = []
        if call.name is not None:  # a new call: its header
            assert call.id is not None  # (a header carries the call's id)
            out += self.close()
            custom = call.name in self.custom
            self.input = InputStream() if custom else None
            out += self._start(_custom_item(_new_id("ctc"), call.id, call.name, "", status="in_progress") if custom
                               else _call_item(_new_id("fc"), call.id, call.name, "", status="in_progress"))
        if self.input is not None:
            piece = self.input.feed(call.arguments)
            if piece:
                self.text += piece
                out.append(self.emit("response.custom_tool_call_input.delta", item_id=self._open_id(),
                                     output_index=self._index(), delta=piece))
        elif call.arguments:
            self.text += call.arguments
            out.append(self.emit("response.function_call_arguments.delta", item_id=self._open_id(),
                                 output_index=self._index(), delta=call.arguments))
        return out


def _custom(plan: RequestPlan) -> frozenset[str]:
    """Custom tools: their calls are answered as custom_tool_call items."""
    return plan.tool_spec.custom if plan.tool_spec is not None else frozenset()


def response_stream(state: ServerState, store: ResponseStore, plan: RequestPlan) -> AsyncIterator[Events]:
    """The Responses event stream; a failure after the start ends it with ``error`` and ``response.failed``."""
    pr = _responses(plan)
    ev = _Events(_custom(plan))

    def failed(exc: APIError) -> list[bytes]:
        closed = ev.close(status="incomplete")  # the item being streamed ends, as far as it got
        return [*closed, ev.emit("error", code=exc.code, message=exc.message, param=exc.param),
                ev.emit("response.failed", response=_response(
                    state, pr, status="failed", output=ev.output,
                    error={"code": exc.code or "server_error", "message": exc.message}))]

    return guarded_stream(_events(state, store, plan, ev), state=state, request_ids=[plan.id], on_error=failed)


async def _events(state: ServerState, store: ResponseStore, plan: RequestPlan, ev: _Events) -> AsyncIterator[Events]:
    pr = _responses(plan)
    # created and in_progress are ready together: one write (docs/performance.md)
    yield (ev.emit("response.created", response=_response(state, pr, status="in_progress", output=[]))
           + ev.emit("response.in_progress", response=_response(state, pr, status="in_progress", output=[])))
    run = Run(state, plan, streaming=True)
    finish = "stop"
    final: FinalMessage | None = None
    closed = False
    ended = False

    def ending() -> list[bytes]:
        """The open item closed, the response stored and completed, made once: with the last
        finish when it comes, in the same write."""
        nonlocal ended
        ended = True
        status = "incomplete" if finish == "length" else "completed"
        item_status = status  # (a message: cut with the response; a call: as the non-streamed item, below)
        if final is not None and final.tool_calls and ev.open is not None and ev.open["type"] in _CALLS:
            item_status = _call_status(final, len(final.tool_calls) - 1)  # (the open item is the last call)
        out = ev.close(status=item_status)
        body = _response(state, pr, status=status, output=ev.output, usage=_usage(run.usage()),
                         closed_by_budget=closed)
        _store(store, pr, body, ev.output)
        return [*out, ev.emit(f"response.{status}", response=body)]

    try:
        async with contextlib.aclosing(run.text_updates() if FAST_PATHS and QUIET else run.updates(quiet=QUIET)) as updates:
            async for u in updates:
                if isinstance(u, TextLane):  # the message's next texts, framed as they come
                    yield u.events(ev.text_frame())
                    continue
                if isinstance(u, ParsedLane):  # the open item's next text or arguments (server/plan/lanes.py)
                    yield u.events(*ev.lane_frames())
                    continue
                if not isinstance(u, ChoiceUpdate):
                    continue
                out: list[bytes] = []  # one engine chunk's events go out in one write
                for d in u.deltas:
                    if d.reasoning:
                        out += ev.reasoning(d.reasoning)
                    if d.content:
                        out += ev.content(d.content)
                    for call in d.tool_calls:
                        out += ev.call(call)
                if u.finish_reason:
                    finish, final = u.finish_reason, u.final
                    closed = u.closed_by_budget
                    if not ev.output and ev.open is None:  # an empty answer is an empty message
                        out += ev.content("")
                    if all(c.finish for c in run.choices):  # the last choice ended: the rest is ready now
                        out += ending()
                if out:
                    yield b"".join(out)
        if not ended:  # the engine stopped without finishing
            yield b"".join(ending())
    finally:
        run.timer.close()
