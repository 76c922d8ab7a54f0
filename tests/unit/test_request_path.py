"""The corridor a chat request with tools walks while it is planned: the modules its calls enter,
in order. Issue #38's measure: a stay is a run of calls in one module; a module returned to is one
entered again after the path left it. The plan must not keep coming back (each module at most twice),
so a reader follows the request through the house once instead of pacing between rooms.

Leaf utilities (``server.lru``, ``server.histogram``, ``server.json_types``: the bottom rank of
tests/unit/test_layers.py, importing nothing of the server) are furniture, not rooms: a bounded
dict's ``get`` is not a place the request goes. Nor is code no module's file holds: the ``__init__``
a dataclass writes for a frozen value (``<string>``) builds the value where the caller stands."""
from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest

from server.plan import build_plan
from server.protocol import ChatCompletionRequest
from tests.unit.test_layers import RANKS

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": SCHEMA}},
         {"type": "function", "function": {"name": "get_time"}}]
BODIES: dict[str, dict[str, Any]] = {
    "auto": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS},
    "named": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS,
              "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
    "allowed": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS,
                "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
                    {"type": "function", "function": {"name": "get_time"}}]}}},
}
OURS = ("server.", "tool_parsers", "reasoning_parsers")
FURNITURE = tuple(m for m, rank in RANKS.items() if rank < 0)
SHOW_FUNCS = os.environ.get("GRAMSERVE_PATH_FUNCS") == "1"  # name the functions too, when reading a path


@contextmanager
def _path() -> Iterator[list[str]]:
    """The gramserve module of every plain call made in this thread, in order."""
    seen: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and not frame.f_code.co_filename.startswith("<"):
            name = str(frame.f_globals.get("__name__", ""))
            if name.startswith(OURS) and not name.startswith(FURNITURE):
                seen.append(name if not SHOW_FUNCS else f"{name}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


def stays(path: list[str]) -> list[str]:
    """Runs of one module, in order."""
    return [m for i, m in enumerate(path) if i == 0 or path[i - 1] != m]


def returns(path: list[str]) -> Counter[str]:
    """How often the path comes back to a module it had left."""
    runs = stays(path)
    back: Counter[str] = Counter()
    for i, m in enumerate(runs):
        if m in runs[:i]:
            back[m] += 1
    return back


@pytest.mark.parametrize("warm", [False, True], ids=["first", "again"])
@pytest.mark.parametrize("name", list(BODIES))
def test_planning_a_chat_request_with_tools_returns_to_no_module_more_than_twice(
        make_app: Any, name: str, warm: bool) -> None:
    b = make_app()
    req = ChatCompletionRequest.model_validate(BODIES[name])
    if warm:
        build_plan(b.state, req)
    with _path() as path:
        build_plan(b.state, req)
    back = returns(path)
    over = {m: n for m, n in back.items() if n > 2}
    print(f"\n{name} {'warm' if warm else 'cold'}: {len(stays(path))} stays in {len(set(path))} modules; returns "
          f"{sum(back.values())}: {back.most_common(8)}")
    assert not over, f"{over}; the path: {' > '.join(stays(path))}"
