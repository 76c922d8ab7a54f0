"""What a request asks the grammar to enforce, as pure data: :class:`ConstraintSpec`.

Chat, completions, Responses (through chat), ``/v1/schemas/check``, ``gramserve check-schema``
and ``--precompile`` all turn their body into a spec with :func:`constraint_spec`, so the same
body builds the same spec wherever it comes from, and the one memo
(:func:`server.structured.from_request.checked`) is keyed on it. A spec holds no process
state: what the server can enforce (its tool-call format, its reasoning markers, its limits)
comes in as :class:`Capabilities`, made once from ``Settings`` and the parsers.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from types import EllipsisType
from typing import TYPE_CHECKING

from pydantic import BaseModel

from server.config import Settings
from server.json_types import JsonObject
from server.protocol import ChatCompletionRequest, CompletionRequest
from server.state import ServerState
from server.structured.constraints import ReasoningSpec
from server.structured.tools import ToolSpec, read_tools

if TYPE_CHECKING:  # pragma: no cover
    from reasoning_parsers.base import ReasoningParser
    from tool_parsers.base import CallFormat, ToolParser

__all__ = ["Capabilities", "ConstraintSpec", "Limits", "capabilities", "constraint_spec"]

AnyRequest = ChatCompletionRequest | CompletionRequest


@dataclass(frozen=True)
class Limits:
    """The caps every schema, regex, grammar and choice list passes (from ``Settings``)."""

    max_depth: int = 64
    max_bytes: int = 256 * 1024
    max_min_length: int = 1024

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        return cls(max_depth=settings.max_schema_depth, max_bytes=settings.max_schema_bytes,
                   max_min_length=settings.max_schema_min_length)


@dataclass(frozen=True)
class Capabilities:
    """What this process can enforce: made once from Settings and the configured parsers."""

    limits: Limits = Limits()
    call_format: CallFormat | None = None  # the tool-call family's format (None: no tool parser)
    reasoning: ReasoningSpec | None = None  # the think block a reasoning parser lets through
    tool_constraints: bool = True  # False: tool_choice "auto" is not enforced by grammar
    guidance: bool = True  # the engine also runs llguidance (server/engine/hybrid_backend.py)
    max_tools: int = 128  # the most tools one request may send

    @classmethod
    def of(cls, settings: Settings, *, tool_parser: ToolParser | None = None,
           reasoning_parser: ReasoningParser | None = None,
           guidance: bool = True) -> Capabilities:
        reasoning = None
        if reasoning_parser is not None:
            reasoning = ReasoningSpec(start=reasoning_parser.start, end=reasoning_parser.end,
                                      starts_open=reasoning_parser.starts_open,
                                      required=settings.reasoning_required, switches=reasoning_parser.switches,
                                      thinking_default=reasoning_parser.thinking_default)
        return cls(limits=Limits.from_settings(settings), call_format=getattr(tool_parser, "format", None),
                   reasoning=reasoning, tool_constraints=settings.tool_constraints, guidance=guidance,
                   max_tools=settings.max_tools)


@dataclass(frozen=True)
class ConstraintSpec:
    """Everything the constraint depends on, and nothing else. ``memo_key`` is its identity for
    the memo (key order kept: property order is part of the grammar)."""

    response_format: JsonObject | None = None
    structured_outputs: JsonObject | None = None
    tools: ToolSpec | None = None
    call_format: CallFormat | None = None
    reasoning: ReasoningSpec | None = None
    limits: Limits = Limits()
    tool_constraints: bool = True
    guidance: bool = True  # llguidance may enforce a JSON schema (Capabilities.guidance)

    #: derived when made: no format and no tools (nothing to enforce, nothing to remember); the
    #: spec's identity for the memo (None: a value that is not plain JSON, never remembered)
    empty: bool = field(init=False)
    memo_key: str | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "empty", not (self.response_format or self.structured_outputs or self.tools))
        try:
            key: str | None = self.key()
        except (TypeError, ValueError):  # not plain JSON: checked every time
            key = None
        object.__setattr__(self, "memo_key", key)

    def key(self) -> str:
        """Compact JSON of every field; raises TypeError / ValueError for values that are not
        plain JSON (such a spec is built every time, never remembered)."""
        tools = self.tools
        return json.dumps([
            self.response_format, self.structured_outputs,
            None if tools is None else tools.key,
            None if self.call_format is None else _fields(self.call_format),
            None if self.reasoning is None else _fields(self.reasoning),
            _fields(self.limits), self.tool_constraints, self.guidance,
        ], separators=(",", ":"), ensure_ascii=False, allow_nan=False)


_CAPS: dict[tuple[int, ...], tuple[tuple[object, ...], Capabilities]] = {}  # per process: one entry (tests: a few)


def capabilities(state: ServerState) -> Capabilities:
    """What this server can enforce (its settings and parsers): made once per settings, parsers and
    engine kind, so the spec's fields are the same objects request after request (:func:`_fields`)."""
    guidance = bool(getattr(state.engine, "guidance", True))
    made_of = (state.settings, state.tool_parser, state.reasoning_parser, guidance)
    key = tuple(map(id, made_of))
    hit = _CAPS.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], made_of, strict=True)):
        return hit[1]
    caps = Capabilities.of(state.settings, tool_parser=state.tool_parser, reasoning_parser=state.reasoning_parser,
                           guidance=guidance)
    if len(_CAPS) >= 16:
        _CAPS.clear()
    _CAPS[key] = (made_of, caps)
    return caps


_FIELDS: dict[int, tuple[object, JsonObject]] = {}  # id -> (the object, held so the id stays its own; its fields)


def _fields(obj: CallFormat | ReasoningSpec | Limits) -> JsonObject:
    """``asdict(obj)`` of a per-process immutable (the call format, the reasoning rule, the limits),
    made once per object: the memo key of every request's spec reads them."""
    hit = _FIELDS.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    value: JsonObject = asdict(obj)
    if len(_FIELDS) >= 64:
        _FIELDS.clear()
    _FIELDS[id(obj)] = (obj, value)
    return value


def _dump(model: BaseModel | None) -> JsonObject | None:
    return model.model_dump(by_alias=True, exclude_none=True) if model is not None else None


def _response_format(req: AnyRequest) -> JsonObject | None:
    """``response_format`` without what the grammar ignores (the format's name, description)."""
    rf = _dump(req.response_format)
    js = rf.get("json_schema") if rf is not None else None
    if rf is not None and isinstance(js, dict):
        rf["json_schema"] = {k: v for k, v in js.items() if k in ("schema", "strict")}
    return rf


def _frames_answers(caps: Capabilities, req: AnyRequest) -> bool:
    """Whether a chat answer is framed by the family's format (Harmony's final channel), tools or not."""
    fmt = caps.call_format
    return fmt is not None and isinstance(req, ChatCompletionRequest) and fmt.answer({"type": "any_text"}) is not None


def constraint_spec(req: AnyRequest, caps: Capabilities, *, think: bool = True,
                    tools: ToolSpec | None | EllipsisType = ...) -> ConstraintSpec:
    """The spec of ``req`` on a server that can enforce ``caps``. ``think`` False leaves the
    think block out (capped thinking runs it as its own engine phase). ``tools``: the request's
    tools as the plan read them (:func:`~server.structured.tools.read_tools`); left out, they
    are read here (the schema check, ``--precompile``)."""
    if isinstance(tools, EllipsisType):
        # the schema check and --precompile build the grammar a server with a call format would
        tools = read_tools(req, max_tools=caps.max_tools, can_call=True) if isinstance(req, ChatCompletionRequest) else None
    offered = tools if tools is not None and tools.offered else None
    reasoning = None
    if (think and isinstance(req, ChatCompletionRequest) and caps.reasoning is not None
            and caps.reasoning.thinks(req.chat_template_kwargs, req.reasoning_effort)):
        reasoning = caps.reasoning  # text completions are not split into reasoning and answer
    return ConstraintSpec(
        response_format=_response_format(req), structured_outputs=_dump(req.structured_outputs),
        tools=offered, call_format=caps.call_format if offered or _frames_answers(caps, req) else None,
        reasoning=reasoning, limits=caps.limits, tool_constraints=caps.tool_constraints, guidance=caps.guidance,
    )
