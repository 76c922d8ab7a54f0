"""``format: date`` / ``date-time`` become calendar-exact patterns, verified with the matcher."""
from __future__ import annotations

import datetime
import json
import random
import re

import pytest

from evals.schema_keywords import Matcher
from server.structured.schema_support import analyze_schema, normalize_schema


def _python_date_ok(s: str) -> bool:  # what jsonschema's ``date`` checker accepts
    try:
        datetime.date.fromisoformat(s)
    except ValueError:
        return False
    return re.fullmatch(r"\d{4}-\d{2}-\d{2}", s) is not None


def _dates() -> list[str]:
    rng = random.Random(7)
    out = ["2024-02-29", "2023-02-29", "1900-02-29", "2000-02-29", "2400-02-29", "0000-01-01", "0001-01-01",
           "2024-04-31", "2024-06-30", "2024-13-01", "2024-00-10", "2024-12-31", "9999-12-31", "2024-1-01"]
    for _ in range(400):
        y = rng.choice([rng.randint(0, 9999), rng.choice([4, 100, 400, 1600, 1900, 2000, 2100])])
        out.append(f"{y:04d}-{rng.randint(0, 13):02d}-{rng.randint(0, 32):02d}")
    return out


def test_date_is_exact_after_normalisation():
    schema = {"type": "string", "format": "date"}
    assert analyze_schema(schema, strict_mode=True).strict_problems()  # the grammar's own format rule is loose
    norm = normalize_schema(schema)
    assert "format" not in norm and not analyze_schema(norm, strict_mode=True).strict_problems()
    m = Matcher(norm, strict_mode=True)
    mismatches = [d for d in _dates() if m.accepts(json.dumps(d)) != _python_date_ok(d)]
    assert not mismatches, mismatches[:10]


@pytest.mark.parametrize("value,ok", [
    ("2024-02-29T23:59:59Z", True), ("2024-01-01T12:00:00.123+05:30", True), ("1999-12-31T00:00:00-08:00", True),
    ("2023-02-29T00:00:00Z", False), ("2024-04-31T00:00:00Z", False), ("2024-01-01T24:00:00Z", False),
    ("2024-01-01T12:60:00Z", False), ("2024-01-01T12:00:00", False), ("2024-01-01 12:00:00Z", False),
])
def test_date_time_never_looser_than_rfc3339(value, ok):
    m = Matcher(normalize_schema({"type": "string", "format": "date-time"}), strict_mode=True)
    assert m.accepts(json.dumps(value)) is ok


def test_not_rewritten_when_it_would_change_meaning():
    with_pattern = {"type": "string", "format": "date", "pattern": "^2"}
    assert normalize_schema(with_pattern) == with_pattern  # two patterns would need allOf (loose)
    untyped = {"format": "date"}
    assert normalize_schema(untyped) == untyped
    nested = normalize_schema({"type": "object", "properties": {"d": {"type": "string", "format": "date-time"}}})
    assert "pattern" in nested["properties"]["d"] and "format" not in nested["properties"]["d"]
