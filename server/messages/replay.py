"""Replay a model's raw output offline: what gramserve makes of it, without an engine.

:func:`parse_output` gives the assistant message a non-streamed ``/v1/chat/completions``
returns for that text; :func:`stream_output` the ``delta`` objects a streamed one sends,
chunk by chunk. Both run the server's own code: the family's parser, the reasoning parser,
:class:`~server.messages.message_stream.MessageStream` built as ``server/plan/run.py``
builds it (calls to names outside ``tools`` dropped, a repeated call ends the turn), and
the OpenAI JSON of :mod:`server.messages.openai_message`. ``gramserve parse`` is the command
over them (``server/messages/replay_cli.py``).

One difference by design: the server parses calls only when the request has ``tools``;
a replay without ``tools`` parses them anyway and keeps every name.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from server.json_types import JsonObject, JsonValue
from server.messages.message_stream import FinalMessage, MessageStream, new_tool_call_id
from server.messages.openai_message import assistant_message, delta_bodies, finish_reason, opening
from tool_parsers import get_family

__all__ = ["Replay", "parse_output", "stream_output", "tool_names", "tool_schemas", "DEFAULT_CHUNK"]

DEFAULT_CHUNK = 4  # characters per streamed chunk when none is given (about one token of English)


@dataclass(frozen=True)
class Replay:
    """What the server makes of one output.

    ``message``: ``choices[0].message`` (for a stream, what its deltas add up to);
    ``deltas``: each chunk's ``delta`` in order, the last one the ``{}`` that carries
    ``finish_reason`` (empty when not streamed); ``notes``: what the server would log about
    the calls (malformed calls kept as content, unknown names dropped, a repeat that ended
    the turn)."""

    message: JsonObject
    finish_reason: str
    deltas: tuple[JsonObject, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> JsonObject:
        """The replay as one JSON object (``gramserve parse --jsonl`` writes one per line)."""
        out: JsonObject = {"deltas": list(self.deltas)} if self.deltas else {"message": self.message}
        return {**out, "finish_reason": self.finish_reason, "notes": list(self.notes)}


def tool_names(tools: JsonValue | Sequence[JsonValue]) -> tuple[str, ...] | None:
    """The function names of a request's ``tools`` as sent (chat's nested or Responses' flat shape);
    None without tools. ValueError for a value that is not a list of named function tools."""
    schemas = tool_schemas(tools)
    return None if schemas is None else tuple(schemas)


def tool_schemas(tools: JsonValue | Sequence[JsonValue]) -> JsonObject | None:
    """Name -> ``parameters`` (``{}`` when absent) of a request's ``tools``, as the server
    hands them to the parser; None without tools. ValueError as :func:`tool_names`."""
    if tools is None:
        return None
    if not isinstance(tools, (list, tuple)):
        raise ValueError("'tools' must be a list of tools")
    schemas: JsonObject = {}
    for i, tool in enumerate(tools):
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or not isinstance(fn, dict) \
                or not isinstance(name, str):
            raise ValueError(f"tools[{i}] is not a function tool with a name (custom tools are not replayed)")
        schemas[name] = fn.get("parameters") or {}
    return schemas


def _stream(tool_call_parser: str | None, reasoning_parser: str | None, tools: JsonValue | Sequence[JsonValue], *,
            thinking: bool, streaming: bool, allow_duplicate_tool_calls: bool,
            id_factory: Callable[[], str]) -> MessageStream:
    """The MessageStream ``server/plan/run.py::_new_stream`` builds for such a request."""
    from reasoning_parsers import get_reasoning_parser

    schemas = tool_schemas(tools)
    family = get_family(tool_call_parser) if tool_call_parser else None
    tool_start = (family.format.trigger,) if family else ()  # as resolve_parsers gives the server's
    return MessageStream(
        tool_parser=family.parser if family else None,
        reasoning_parser=get_reasoning_parser(reasoning_parser, thinking=thinking, tool_start=tool_start)
        if reasoning_parser else None,
        tool_names=None if schemas is None else tuple(schemas),
        tool_schemas=schemas,
        id_factory=id_factory,
        streaming=streaming,
        guard_repeats=not allow_duplicate_tool_calls,
    )


def _notes(final: FinalMessage) -> tuple[str, ...]:
    return tuple(final.errors) + tuple(final.dropped) + tuple(final.repeated)


def parse_output(model_output: str | Iterable[str], *, tool_call_parser: str | None, reasoning_parser: str | None = None,
                 tools: JsonValue | Sequence[JsonValue] = None, thinking: bool = True,
                 reasoning_field: str = "reasoning_content", allow_duplicate_tool_calls: bool = False,
                 id_factory: Callable[[], str] = new_tool_call_id) -> Replay:
    """The message a non-streamed request gets for ``model_output`` (the text, or the engine's
    pieces of it: after a repeated call the server ignores the pieces that follow). Names are the server's
    (``--tool-call-parser``, ``--reasoning-parser``; None: no such parser); ``thinking=False``
    as a request with ``enable_thinking: false``; ValueError for an unknown name."""
    stream = _stream(tool_call_parser, reasoning_parser, tools, thinking=thinking, streaming=False,
                     allow_duplicate_tool_calls=allow_duplicate_tool_calls, id_factory=id_factory)
    for piece in [model_output] if isinstance(model_output, str) else model_output:
        stream.feed(piece)
    stream.finish()
    final = stream.final_message()
    field_name = reasoning_field if reasoning_parser else None
    return Replay(assistant_message(final, reasoning_field=field_name), finish_reason(final), (), _notes(final))


def stream_output(model_output: str | Iterable[str], *, tool_call_parser: str | None,
                  reasoning_parser: str | None = None, tools: JsonValue | Sequence[JsonValue] = None,
                  chunk: int = DEFAULT_CHUNK, thinking: bool = True, reasoning_field: str = "reasoning_content",
                  allow_duplicate_tool_calls: bool = False,
                  id_factory: Callable[[], str] = new_tool_call_id) -> Replay:
    """The deltas a streamed request sends when the engine yields ``model_output`` in chunks:
    the given pieces, or the text cut every ``chunk`` characters. Each chunk's deltas are
    framed as the chat service frames them: the role first, one body per text delta and per
    tool-call entry, and the closing ``{}``."""
    if isinstance(model_output, str):
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1 character, not {chunk}")
        pieces = [model_output[i : i + chunk] for i in range(0, len(model_output), chunk)]
    else:
        pieces = list(model_output)
    stream = _stream(tool_call_parser, reasoning_parser, tools, thinking=thinking, streaming=True,
                     allow_duplicate_tool_calls=allow_duplicate_tool_calls, id_factory=id_factory)
    field_name = reasoning_field if reasoning_parser else None
    deltas: list[JsonObject] = []
    for i, piece in enumerate(pieces):
        step = [stream.feed(piece)]
        if stream.repeat is not None or i == len(pieces) - 1:  # the engine's last chunk, or the turn ended
            step.append(stream.finish())
        for body in (body for d in step for body in delta_bodies(d, reasoning_field=field_name)):
            deltas += opening(body) if not deltas else [body]
        if stream.repeat is not None:
            break
    if not pieces:
        stream.finish()
    if not deltas:  # every choice opens, even one the engine said nothing for
        deltas += opening(None)
    final = stream.final_message()
    deltas.append({})
    message = assistant_message(final, reasoning_field=field_name)
    return Replay(message, finish_reason(final), tuple(deltas), _notes(final))
