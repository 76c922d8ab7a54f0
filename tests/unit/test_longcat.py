"""longcat (``tool_parsers/longcat.py``): vLLM's LongCat-Flash parser cases under every chunking, and
detection from a template that writes LongCat's markers. Its grammar, write/parse round trip and
replay are the every-family tests' (test_constraints, test_write_parse, test_replay)."""
from __future__ import annotations

from typing import Any

import pytest

from tests.unit import family_cases as fc
from tool_parsers import detect_tool_parser

DATA, CALLS, EXPECT = fc.family_data("longcat")


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["id"])
def test_case(case: dict[str, Any]) -> None:
    fc.check_case("longcat", DATA, case, markers=("<longcat_tool_call>", "</longcat_tool_call>"))


def test_detected_before_hermes() -> None:
    template = "{% for t in tools %}{{ t | tojson }}{% endfor %}<longcat_tool_call>{...}</longcat_tool_call>"
    assert detect_tool_parser(template) == "longcat"
    assert detect_tool_parser("<tool_call>{...}</tool_call>") == "hermes"
