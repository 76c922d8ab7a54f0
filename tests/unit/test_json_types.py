"""server/json_types.py: the walks every layer shares."""
from __future__ import annotations

from server.json_types import integral_numbers, nesting_exceeds


def test_integral_numbers_reads_integral_floats_as_integers() -> None:
    value = {"a": [1.0, 1.5, True, "1.0", {"b": -0.0}], "c": 2**70 * 1.0, "d": None}
    out = integral_numbers(value)
    assert out == {"a": [1, 1.5, True, "1.0", {"b": 0}], "c": 2**70, "d": None}
    assert type(out["a"][0]) is int and type(out["a"][1]) is float and out["a"][2] is True  # bool stays bool
    assert type(integral_numbers(2.0**70, below=2**63)) is float  # beyond the bound: kept as it is
    assert value["a"][0] == 1.0 and type(value["a"][0]) is float  # the input is not changed


def test_nesting_exceeds_counts_levels() -> None:
    assert not nesting_exceeds({"a": [1]}, 2)
    assert nesting_exceeds({"a": [[1]]}, 2)
