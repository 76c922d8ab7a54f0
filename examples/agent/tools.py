"""What every tool of the agent is: a name, a description the model reads, a JSON schema for its
arguments, and a function. Errors are values the loop can hand back to the model."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Tool", "ToolError", "ToolUnavailable", "tool_spec"]


class ToolError(Exception):
    """A failure the model should read as an observation.

    ``retryable`` False means running the same call again cannot help (a refused query, bad
    arguments): the loop does not retry it. True means a transient failure (timeout, busy
    resource): the loop retries it once.
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class ToolUnavailable(ToolError):
    """The tool cannot run at all here (offline, not configured): never retried."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


@dataclass(frozen=True, kw_only=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[..., Any] = field(compare=False)
    cacheable: bool = True  # pure reads: the same arguments give the same observation


def tool_spec(tool: Tool) -> dict[str, Any]:
    """The OpenAI ``tools`` entry of a tool."""
    return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                             "parameters": tool.parameters}}
