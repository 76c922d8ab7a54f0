"""``web_search``: the public web. This example runs offline, so the tool is there (the model must
learn to pick it for outside facts) but answers that it is unavailable; the system prompt tells the
model to say so and answer from internal sources. Pass ``backend`` to make it real."""
from __future__ import annotations

from typing import Any, Callable

from .tools import Tool, ToolUnavailable

__all__ = ["web_tool"]


def web_tool(backend: Callable[[str], Any] | None = None) -> Tool:
    def run(query: str) -> Any:
        if backend is None:
            raise ToolUnavailable("web_search is unavailable: this agent runs offline, with no internet "
                                  "access. Say so, and answer from internal sources if they help.")
        return backend(query)

    description = (
        "Search the public internet for facts from outside the company: current market prices "
        "(e.g. copper, steel, oil), exchange rates, news, weather, public information about other "
        "companies or laws (e.g. 'gold price today', 'latest container shipping news').\n"
        "NOT for: the company's own orders, contracts, providers or amounts (use sql_query); the "
        "company's own policies, clauses or procedures (use vector_search)."
    )
    parameters = {
        "type": "object",
        "properties": {"query": {"type": "string", "maxLength": 300, "description": "the web search query"}},
        "required": ["query"],
        "additionalProperties": False,
    }
    return Tool(name="web_search", description=description, parameters=parameters, run=run,
                cacheable=backend is not None)
