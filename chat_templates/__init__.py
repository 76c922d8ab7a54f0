"""Built-in chat templates, one per tool-call format.

Each ``<name>.jinja`` renders OpenAI ``tools`` and tool-call history the way its model
family was trained; the name matches the tool parser of the same format.
"""
from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Mapping

__all__ = ["BUILTIN_TEMPLATES", "TEMPLATE_DIR", "builtin_template_path"]

TEMPLATE_DIR: Path = Path(__file__).resolve().parent

# name -> file, every <name>.jinja here; the name is also the matching tool-call family's name.
BUILTIN_TEMPLATES: Mapping[str, Path] = MappingProxyType(
    {path.stem: path for path in sorted(TEMPLATE_DIR.glob("*.jinja"))}
)


def builtin_template_path(name: str) -> Path:
    """Path of the built-in template ``name`` (``hermes``, ``llama3_json``, ``mistral``)."""
    try:
        return BUILTIN_TEMPLATES[name]
    except KeyError:
        known = ", ".join(sorted(BUILTIN_TEMPLATES))
        raise ValueError(f"unknown built-in chat template {name!r}; choose one of: {known}") from None
