"""A request's tools read once: the one frozen, typed :class:`ToolSpec`, and every check on it.

``tools``, ``tool_choice``, ``parallel_tool_calls``, the legacy ``functions`` / ``function_call``
(made chat's shape by ``server.protocol``) and Responses' flat forms (made chat's by
``server.responses.translate``) are read here into one :class:`ToolSpec`: the tools as
:class:`Tool` (name, parameters as sent, the template's form), the typed :class:`ToolChoice`, and
whether calls may be parallel. Its checks live here too: how many tools, that a ``tool_choice``
has tools to choose from, that names are non-empty and unique, and that the choice fits the
tools. Everything downstream (the template, the grammar, the finishing checks, budget-aware
closing) reads the spec, never the raw request. The tools' schemas pass the same schema gate as
any other schema (``server/structured/from_request.py``), when the constraint is built.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from server.errors import bad_request
from server.json_types import JsonObject, JsonValue
from server.protocol import AllowedToolsChoice, ChatCompletionRequest
from server.structured.errors import ConstraintError

__all__ = ["Tool", "ToolChoice", "ToolMode", "ToolSpec", "check_choice_has_tools", "read_tool_choice", "read_tools",
           "tool_spec_of"]

ToolMode = Literal["none", "auto", "required", "named"]


@dataclass(frozen=True)
class ToolChoice:
    """What the model may do with the tools: ``mode``, the one ``named`` tool, the ``allowed``
    subset (``allowed_tools``; None: every tool)."""

    mode: ToolMode
    named: str | None = None
    allowed: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Tool:
    """One function tool: its ``name``, its ``parameters`` schema as sent (None: none given),
    ``index``, its place in ``tools`` (errors name ``tools[index]``), and ``strict`` (the function's
    ``strict: true``: its schema must be enforced exactly, else a 400)."""

    name: str
    parameters: JsonValue = None
    index: int = 0
    strict: bool = False


@dataclass(frozen=True)
class ToolSpec:
    """A request's tools as everything downstream sees them. ``prompt`` is what the chat template
    renders (descriptions included); the rest is what the grammar depends on (descriptions do
    not change it, so they stay out of :attr:`key`). What is derived from them is worked out once,
    when the spec is made, and read as plain fields: the request's path never comes back here."""

    tools: tuple[Tool, ...]
    choice: ToolChoice
    parallel: bool = True
    legacy: bool = False  # the legacy functions API (answered as function_call)
    custom: frozenset[str] = frozenset()  # custom tools (answered as type "custom")
    prompt: tuple[JsonObject, ...] = ()
    #: derived: the choice's mode; whether the tools are offered at all (rendered, constrained,
    #: parsed: not under "none"); the tools whose calls are returned (``allowed_tools`` narrows
    #: them); the tools the grammar lets the model call (a named choice: that one); each returned
    #: tool's arguments schema for the finishing checks (``{}``: any object); and what the
    #: constraint depends on, as plain JSON (the constraint memo's key)
    mode: ToolMode = field(init=False)
    offered: bool = field(init=False)
    names: tuple[str, ...] = field(init=False)
    callable: tuple[Tool, ...] = field(init=False)
    schemas: dict[str, JsonValue] = field(init=False)
    key: list[JsonValue] = field(init=False)

    def __post_init__(self) -> None:
        c = self.choice
        returned = tuple(t for t in self.tools if c.allowed is None or t.name in c.allowed)
        derived = {
            "mode": c.mode, "offered": c.mode != "none", "names": tuple(t.name for t in returned),
            "callable": tuple(t for t in self.tools if t.name == c.named) if c.mode == "named" else returned,
            "schemas": {t.name: t.parameters or {} for t in returned},
            "key": [[[t.name, t.parameters, t.strict] for t in self.tools],
                    [c.mode, c.named, None if c.allowed is None else list(c.allowed)],
                    self.parallel, self.legacy, [n for n in sorted(self.custom)]],
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)


def check_choice_has_tools(choice: object, *, has_tools: bool) -> None:
    """A ``tool_choice`` other than "none" asks for tools the request must give."""
    if choice not in (None, "none") and not has_tools:
        raise ConstraintError("'tool_choice' is set but no 'tools' were given.", "tool_choice", code="invalid_value")


def read_tool_choice(choice: str | Mapping[str, JsonValue] | None, names: Sequence[str]) -> ToolChoice:
    """``choice`` in chat's shape against the tool ``names``; ConstraintError (a 400 on
    ``tool_choice``) for a choice that names what is not there or that no tool can satisfy."""
    if isinstance(choice, Mapping) and choice.get("type") == "allowed_tools":
        listed = choice.get("names")
        allowed = tuple(str(n) for n in listed) if isinstance(listed, list) else ()
        unknown = [n for n in allowed if n not in names]
        if unknown:
            raise ConstraintError(f"tool_choice.allowed_tools names {', '.join(map(repr, unknown))}, which "
                                  f"{'is' if len(unknown) == 1 else 'are'} not in tools.", "tool_choice")
        mode = str(choice.get("mode") or "auto")
        if mode not in ("auto", "required"):
            raise ConstraintError(f"tool_choice.allowed_tools mode {mode!r} is not 'auto' or 'required'.",
                                  "tool_choice")
        return ToolChoice("required" if mode == "required" else "auto", allowed=allowed)
    if choice is None:
        return ToolChoice("auto" if names else "none")
    if isinstance(choice, str):
        if choice == "required":
            if not names:
                raise ConstraintError("tool_choice 'required' needs at least one tool in 'tools'.", "tool_choice")
            return ToolChoice("required")
        if choice == "auto":
            return ToolChoice("auto" if names else "none")
        if choice == "none":
            return ToolChoice("none")
        raise ConstraintError(
            f"tool_choice {choice!r} is not supported; use 'none', 'auto', 'required' or a named function.",
            "tool_choice")
    fn = choice.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str) or not name:
        raise ConstraintError(
            "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}.",
            "tool_choice")
    if not names:
        raise ConstraintError(f"tool_choice names the function {name!r} but no tools were given.", "tool_choice")
    if name not in names:
        raise ConstraintError(
            f"tool_choice names the function {name!r}, which is not in tools (known: {', '.join(names)}).",
            "tool_choice")
    return ToolChoice("named", named=name)


def _read_tool(i: int, tool: JsonValue, seen: set[str]) -> Tool:
    """``tools[i]`` in chat's shape: a function tool with a non-empty name not used before."""
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        raise ConstraintError(f"tools[{i}] must be a function tool.", f"tools[{i}].type")
    fn = tool.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(fn, dict) or not isinstance(name, str) or not name:
        raise ConstraintError(f"tools[{i}].function.name must be a non-empty string.", f"tools[{i}].function.name")
    if name in seen:
        raise ConstraintError(f"tools[{i}]: the tool name {name!r} is used twice.", f"tools[{i}].function.name")
    seen.add(name)
    return Tool(name, fn.get("parameters"), i, strict=fn.get("strict") is True)


def tool_spec_of(tools: Sequence[JsonValue], choice: str | Mapping[str, JsonValue] | None = None, *,
                 parallel: bool = True, legacy: bool = False, custom: frozenset[str] = frozenset()) -> ToolSpec:
    """The spec of tools in chat's shape (a request's, a test's, a benchmark's): each tool and the
    choice checked against them (ConstraintError, a 400, naming the field)."""
    seen: set[str] = set()
    read = tuple(_read_tool(i, t, seen) for i, t in enumerate(tools))
    prompt = tuple(t for t in tools if isinstance(t, dict))
    return ToolSpec(read, read_tool_choice(choice, [t.name for t in read]), parallel=parallel, legacy=legacy,
                    custom=custom, prompt=prompt)


def _choice(req: ChatCompletionRequest) -> str | JsonObject:
    """The request's ``tool_choice`` in chat's dict shape (``allowed_tools`` as its names)."""
    choice = req.tool_choice
    if choice is None:
        return "auto"  # OpenAI's default with tools: one spec (and memo entry) for both spellings
    if isinstance(choice, str):
        return choice
    if isinstance(choice, AllowedToolsChoice):  # the grammar offers only those
        names: list[JsonValue] = [t.function.name if t.function is not None else str(t.name)
                                  for t in choice.allowed_tools.tools]  # protocol.AllowedTool.tool_name
        return {"type": "allowed_tools", "mode": choice.allowed_tools.mode, "names": names}
    dumped: JsonObject = choice.model_dump()
    return dumped


def read_tools(req: ChatCompletionRequest, *, max_tools: int, can_call: bool) -> ToolSpec | None:
    """The request's tools, read and checked once (None: no tools). Under ``tool_choice`` "none"
    the tools are neither rendered nor checked: the spec then holds only how answers are shaped
    (legacy, custom). ``can_call``: this server has a call format."""
    if req.tools and len(req.tools) > max_tools:
        raise bad_request(f"Too many tools: {len(req.tools)} (this server accepts at most {max_tools}).",
                          param="tools", code="too_many_tools")
    check_choice_has_tools(req.tool_choice, has_tools=bool(req.tools))
    if not req.tools:
        return None
    legacy = req.functions is not None
    custom = frozenset(t.custom.name for t in req.tools if t.custom is not None and t.type == "custom")
    if req.tool_choice == "none":
        return ToolSpec((), ToolChoice("none"), parallel=req.parallel_tool_calls, legacy=legacy, custom=custom)
    if not can_call:
        raise bad_request("This server has no tool-call parser for its chat template; start it with "
                          "--tool-call-parser NAME to use 'tools'.", param="tools", code="tools_unsupported")
    # the template's form: a custom tool as the function it is called as (protocol.ToolDef)
    tools: list[JsonValue] = [{"type": "function", "function": t.function.model_dump(exclude_none=True, by_alias=True)}
                              for t in req.tools if t.function is not None]
    return tool_spec_of(tools, _choice(req), parallel=req.parallel_tool_calls, legacy=legacy, custom=custom)
