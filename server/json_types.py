"""The types of JSON data as it runs through the server: request bodies, schemas, tool specs.

A leaf module (it imports nothing of the server), so every layer can name what it carries instead
of ``Any``. ``JsonValue`` is exactly what ``json.loads`` can return; code that reads a field of a
user's JSON narrows it (``isinstance``) before use, which is also where a malformed body is caught.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

__all__ = ["JsonValue", "JsonObject", "JsonArray", "JsonMapping"]

JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"
JsonArray: TypeAlias = "list[JsonValue]"
#: A read-only view of a JSON object (accepts any ``dict[str, X]`` whose values are JSON).
JsonMapping: TypeAlias = "Mapping[str, JsonValue]"
