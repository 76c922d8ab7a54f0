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
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from server.config import Settings
from server.protocol import ChatCompletionRequest, CompletionRequest
from server.structured.constraints import ReasoningSpec
from server.structured.tool_choice import ToolChoice, ToolMode, read_tool_choice

if TYPE_CHECKING:  # pragma: no cover
    from tool_parsers.base import CallFormat

__all__ = ["Capabilities", "ConstraintSpec", "Limits", "ToolSpec", "constraint_spec", "tool_spec", "prompt_tools"]

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

    @classmethod
    def of(cls, settings: Settings, *, tool_parser: Any = None, reasoning_parser: Any = None,
           guidance: bool = True) -> Capabilities:
        reasoning = None
        if reasoning_parser is not None:
            reasoning = ReasoningSpec(start=reasoning_parser.start, end=reasoning_parser.end,
                                      starts_open=reasoning_parser.starts_open,
                                      required=settings.reasoning_required, switches=reasoning_parser.switches,
                                      thinking_default=reasoning_parser.thinking_default)
        return cls(limits=Limits.from_settings(settings), call_format=getattr(tool_parser, "format", None),
                   reasoning=reasoning, tool_constraints=settings.tool_constraints, guidance=guidance)


@dataclass(frozen=True)
class ToolSpec:
    """A request's tools as the grammar sees them, normalised across the three ``tool_choice``
    shapes (chat's model, the legacy ``function_call``, Responses' flat form, all made chat's by
    then). ``tools`` holds (name, parameters) only: descriptions do not change the grammar."""

    tools: tuple[tuple[str, Any], ...]
    choice: str | dict[str, Any]  # "auto" | "required" | {"type": "function", ...} | allowed_tools
    parallel: bool = True
    legacy: bool = False  # the legacy functions API (answered as function_call)
    custom: frozenset[str] = frozenset()  # custom tools (answered as type "custom")

    @property
    def choice_read(self) -> ToolChoice:
        """``choice`` read against the tools (:func:`~server.structured.tool_choice.read_tool_choice`:
        the one reader; a choice that does not fit the tools raises ConstraintError)."""
        read = self.__dict__.get("_read")
        if read is None:
            read = self.__dict__["_read"] = read_tool_choice(self.choice, [n for n, _ in self.tools])
        return read

    @property
    def mode(self) -> ToolMode:
        return self.choice_read.mode

    @property
    def names(self) -> tuple[str, ...]:
        """The tools whose calls are returned (``allowed_tools`` narrows them, a named choice is one;
        the rest stay in the prompt)."""
        allowed = self.choice_read.allowed
        return tuple(n for n, _ in self.tools if allowed is None or n in allowed)

    def as_tools(self) -> list[dict[str, Any]]:
        """The function tools in the chat shape the constraint builders read."""
        return [{"type": "function", "function": {"name": n, **({"parameters": p} if p is not None else {})}}
                for n, p in self.tools]


@dataclass(frozen=True)
class ConstraintSpec:
    """Everything the constraint depends on, and nothing else. ``key()`` is its identity for
    the memo (key order kept: property order is part of the grammar)."""

    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    tools: ToolSpec | None = None
    call_format: CallFormat | None = None
    reasoning: ReasoningSpec | None = None
    limits: Limits = Limits()
    tool_constraints: bool = True
    guidance: bool = True  # llguidance may enforce a JSON schema (Capabilities.guidance)

    @property
    def empty(self) -> bool:
        """No format and no tools: nothing to enforce (and nothing to remember)."""
        return not (self.response_format or self.structured_outputs or self.tools)

    def key(self) -> str:
        """Compact JSON of every field; raises TypeError / ValueError for values that are not
        plain JSON (such a spec is built every time, never remembered)."""
        tools = self.tools
        return json.dumps([
            self.response_format, self.structured_outputs,
            None if tools is None else [tools.tools, tools.choice, tools.parallel, tools.legacy, sorted(tools.custom)],
            None if self.call_format is None else asdict(self.call_format),
            None if self.reasoning is None else asdict(self.reasoning),
            asdict(self.limits), self.tool_constraints, self.guidance,
        ], separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def prompt_tools(req: ChatCompletionRequest) -> list[dict[str, Any]] | None:
    """The tools the chat template renders (none under ``tool_choice: "none"``)."""
    if not req.tools or req.tool_choice == "none":
        return None
    return [t.prompt_dict() for t in req.tools]


def _choice(req: ChatCompletionRequest) -> str | dict[str, Any]:
    choice = req.tool_choice
    if choice is None:
        return "auto"  # OpenAI's default with tools: one spec (and memo entry) for both spellings
    if isinstance(choice, str):
        return choice
    names = getattr(choice, "names", None)
    if names is not None:  # allowed_tools: the grammar offers only those
        return {"type": "allowed_tools", "mode": choice.allowed_tools.mode, "names": names()}  # type: ignore[union-attr]
    return choice.model_dump()


def tool_spec(req: ChatCompletionRequest) -> ToolSpec | None:
    """The request's tools as the grammar sees them (None without tools or under "none")."""
    tools = prompt_tools(req)
    if not tools:
        return None
    return ToolSpec(
        tools=tuple((t["function"]["name"], t["function"].get("parameters")) for t in tools),
        choice=_choice(req), parallel=req.parallel_tool_calls, legacy=req.legacy_functions(),
        custom=req.custom_tool_names(),
    )


def _dump(model: Any) -> dict[str, Any] | None:
    return model.model_dump(by_alias=True, exclude_none=True) if model is not None else None


def _response_format(req: AnyRequest) -> dict[str, Any] | None:
    """``response_format`` without what the grammar ignores (the format's name, description)."""
    rf = _dump(req.response_format)
    if rf is not None and isinstance(rf.get("json_schema"), dict):
        rf["json_schema"] = {k: v for k, v in rf["json_schema"].items() if k in ("schema", "strict")}
    return rf


def _frames_answers(caps: Capabilities, req: AnyRequest) -> bool:
    """Whether a chat answer is framed by the family's format (Harmony's final channel), tools or not."""
    fmt = caps.call_format
    return fmt is not None and isinstance(req, ChatCompletionRequest) and fmt.answer({"type": "any_text"}) is not None


def constraint_spec(req: AnyRequest, caps: Capabilities, *, think: bool = True) -> ConstraintSpec:
    """The spec of ``req`` on a server that can enforce ``caps``. ``think`` False leaves the
    think block out (capped thinking runs it as its own engine phase)."""
    tools = tool_spec(req) if isinstance(req, ChatCompletionRequest) else None
    reasoning = None
    if (think and isinstance(req, ChatCompletionRequest) and caps.reasoning is not None
            and caps.reasoning.thinks(req.chat_template_kwargs, req.reasoning_effort)):
        reasoning = caps.reasoning  # text completions are not split into reasoning and answer
    return ConstraintSpec(
        response_format=_response_format(req), structured_outputs=_dump(req.structured_outputs),
        tools=tools, call_format=caps.call_format if tools or _frames_answers(caps, req) else None, reasoning=reasoning,
        limits=caps.limits, tool_constraints=caps.tool_constraints, guidance=caps.guidance,
    )
