"""Per-process server state: the engine and everything compiled once for it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reasoning_parsers.base import ReasoningParser
from server.config import Settings
from server.engine.base import Engine
from server.lru import BoundedLRU
from tool_parsers.base import ToolParser

if TYPE_CHECKING:  # types only (never imported at run time, so the layers still run down)
    from server.chat.render import ChatRenderer
    from server.structured.grammar_cache import GrammarCache

__all__ = ["ServerState", "check_model"]


@dataclass
class ServerState:
    settings: Settings
    engine: Engine
    renderer: ChatRenderer
    grammar_cache: GrammarCache | None
    tool_parser: ToolParser | None = None
    reasoning_parser: ReasoningParser | None = None
    draining: bool = False
    engine_dead: bool = False
    ready: bool = False
    in_flight: int = 0  # generation requests being served (the drain waits for 0)
    running: set[str] = field(default_factory=set)  # engine request ids now generating
    cut: bool = False  # the drain limit passed: running requests were aborted and reported so
    # built constraints by their ConstraintSpec (server.structured.from_request.new_constraint_memo;
    # typed there: naming its type here would draw a circle between the two modules)
    constraint_memo: BoundedLRU[str, Any] | None = None

    def enter(self) -> None:
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)


def check_model(state: ServerState, model: str | None) -> None:
    """404 ``model_not_found`` unless ``model`` names the served model (or is omitted)."""
    from server.errors import APIError

    if model is None or model == state.engine.model_name:
        return
    raise APIError(
        f"The model '{model}' does not exist. This server serves '{state.engine.model_name}'.",
        code="model_not_found",
    )
