"""server/structured/tools.py: tool_choice read once, against the tools."""
from __future__ import annotations

import pytest

from server.structured.errors import ConstraintError
from server.structured.tools import ToolChoice, check_choice_has_tools, read_tool_choice

NAMES = ["get_weather", "search"]


@pytest.mark.parametrize("choice,expected", [
    (None, ToolChoice("auto")),
    ("auto", ToolChoice("auto")),
    ("none", ToolChoice("none")),
    ("required", ToolChoice("required")),
    ({"type": "function", "function": {"name": "search"}}, ToolChoice("named", named="search")),
    ({"type": "allowed_tools", "mode": "required", "names": ["search"]},
     ToolChoice("required", allowed=("search",))),
    ({"type": "allowed_tools", "names": ["get_weather"]}, ToolChoice("auto", allowed=("get_weather",))),
])
def test_each_shape_reads_as_one_value(choice, expected):
    assert read_tool_choice(choice, NAMES) == expected


def test_without_tools_auto_is_none():
    assert read_tool_choice(None, []) == ToolChoice("none")
    assert read_tool_choice("auto", []) == ToolChoice("none")


@pytest.mark.parametrize("choice,names,words", [
    ("sometimes", NAMES, "not supported"),
    ("required", [], "needs at least one tool"),
    ({"type": "function", "function": {"name": "nope"}}, NAMES, "not in tools"),
    ({"type": "function", "function": {"name": "search"}}, [], "no tools were given"),
    ({"type": "function"}, NAMES, "must be"),
    ({"type": "allowed_tools", "names": ["nope"]}, NAMES, "not in tools"),
])
def test_a_choice_that_does_not_fit_is_a_400_on_tool_choice(choice, names, words):
    with pytest.raises(ConstraintError, match=words) as err:
        read_tool_choice(choice, names)
    assert err.value.param == "tool_choice"


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "search"}}])
def test_a_choice_without_tools_is_refused_before_rendering(choice):
    with pytest.raises(ConstraintError, match="no 'tools' were given") as err:
        check_choice_has_tools(choice, has_tools=False)
    assert (err.value.param, err.value.code, err.value.status) == ("tool_choice", "invalid_value", 400)
    check_choice_has_tools(choice, has_tools=True)
    check_choice_has_tools(None, has_tools=False)
    check_choice_has_tools("none", has_tools=False)
