"""docs/tool_calling.md's family table, detection order and parser names, made from the registry.

Each family module says, on its :class:`~tool_parsers.base.ModelFamily`, which models write its
format, what they write and how its template is recognised; this module turns that into the
docs, so adding a family is adding its module (no docs row to write by hand).
``python -m tool_parsers._docs`` rewrites the generated parts of docs/tool_calling.md;
``--check`` exits 1 when they are out of date (tests/unit/test_docs_tables.py runs the check).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from . import FAMILIES
from .base import ModelFamily

__all__ = ["DOC", "detection_order", "families_table", "generated", "parser_names", "rewrite"]

DOC = Path(__file__).resolve().parents[1] / "docs" / "tool_calling.md"
_REGION = re.compile(r"(<!-- generated: (\w+) \(python -m tool_parsers\._docs\) -->\n)(.*?)(<!-- end generated -->)",
                     re.DOTALL)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _rows() -> list[tuple[ModelFamily, list[str]]]:
    """Each family with a row of its own, and the names its row lists (its own first)."""
    rows = []
    for family in sorted(FAMILIES.values(), key=lambda f: f.name):
        if family.doc_row is None:
            others = sorted(f.name for f in FAMILIES.values() if f.doc_row == family.name)
            rows.append((family, [family.name, *others]))
    return rows


def families_table() -> str:
    lines = ["| format (`--tool-call-parser`) | models | what the model writes |", "| --- | --- | --- |"]
    for family, names in _rows():
        lines.append(f"| {' / '.join(f'`{n}`' for n in names)} | {_cell(family.models)} | {_cell(family.writes)} |")
    return "\n".join(lines) + "\n"


def detection_order() -> str:
    """How ``--tool-call-parser auto`` picks a family from a template, in the order it tries them."""
    found = [f for f in sorted(FAMILIES.values(), key=lambda f: (f.detect_order, f.name)) if f.detects]
    return "; ".join(f"{f.detects} → `{f.name}`" for f in found) + ".\n"


def parser_names() -> str:
    return ", ".join(f"`{n}`" for n in sorted(FAMILIES)) + ", and `none` (then `tools` is a 400 `tools_unsupported`).\n"


def generated() -> dict[str, str]:
    return {"families": families_table(), "detection": detection_order(), "names": parser_names()}


def rewrite(text: str) -> str:
    """``text`` with every generated region made anew; a region the docs name but this module does
    not make is an error (a typo would otherwise leave it stale)."""
    parts = generated()

    def fill(m: re.Match[str]) -> str:
        if m.group(2) not in parts:
            raise ValueError(f"docs name an unknown generated region {m.group(2)!r}")
        return m.group(1) + parts[m.group(2)] + m.group(4)

    return _REGION.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/tool_calling.md is out of date")
    args = ap.parse_args(argv)
    text = DOC.read_text()
    new = rewrite(text)
    if args.check:
        if new != text:
            print(f"{DOC} is out of date: run python -m tool_parsers._docs", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
