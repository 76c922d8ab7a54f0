"""The types of JSON data as it runs through the server (request bodies, schemas, tool specs), and
the walks every layer needs of it (how deep it nests; integral numbers as integers).

A leaf module (it imports nothing of the server), so every layer can name what it carries instead
of ``Any``. ``JsonValue`` is exactly what ``json.loads`` can return; code that reads a field of a
user's JSON narrows it (``isinstance``) before use, which is also where a malformed body is caught.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

__all__ = ["JsonValue", "JsonObject", "JsonArray", "JsonMapping", "integral_numbers", "nesting_exceeds"]

JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"
JsonArray: TypeAlias = "list[JsonValue]"
#: A read-only view of a JSON object (accepts any ``dict[str, X]`` whose values are JSON).
JsonMapping: TypeAlias = "Mapping[str, JsonValue]"


def nesting_exceeds(doc: JsonValue, limit: int) -> bool:
    """Whether objects / arrays in ``doc`` nest deeper than ``limit`` (iterative: no recursion)."""
    level = [doc]
    for _ in range(limit):
        level = [
            c
            for n in level
            if isinstance(n, (dict, list))
            for c in (n.values() if isinstance(n, dict) else n)
            if isinstance(c, (dict, list))
        ]
        if not level:
            return False
    return True


def integral_numbers(value: JsonValue, *, below: float = float("inf")) -> JsonValue:
    """``value`` with every integral float (``1.0``) an int, as JSON Schema reads it (``1.0`` is an
    integer and equals ``1``); only those of magnitude under ``below``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < below:
        return int(value)
    if isinstance(value, list):
        return [integral_numbers(x, below=below) for x in value]
    if isinstance(value, dict):
        return {k: integral_numbers(v, below=below) for k, v in value.items()}
    return value
