"""tool_parsers/_docs.py: docs/tool_calling.md's family table, detection order and names are made
from the family modules, so a new family needs no docs edit, and the docs cannot drift from them."""
from __future__ import annotations

import pytest

from tool_parsers import FAMILIES
from tool_parsers._docs import DOC, families_table, rewrite


def test_the_docs_are_what_the_registry_makes() -> None:
    text = DOC.read_text()
    assert rewrite(text) == text, "docs/tool_calling.md is out of date: run python -m tool_parsers._docs"
    for region in ("families", "detection", "names"):
        assert f"<!-- generated: {region} (python -m tool_parsers._docs) -->" in text


def test_every_family_is_in_the_table_once() -> None:
    table = families_table()
    for name in FAMILIES:
        assert table.count(f"`{name}`") >= 1, name
    rows = [line for line in table.splitlines()[2:]]
    firsts = [line.split("`")[1] for line in rows]
    assert len(firsts) == len(set(firsts)) == sum(1 for f in FAMILIES.values() if f.doc_row is None)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_documents_itself(name: str) -> None:
    """A family has its own row (models, what they write) or names the row it shares."""
    family = FAMILIES[name]
    if family.doc_row is None:
        assert family.models and family.writes, f"{name}: say which models write it and what they write"
    else:
        owner = FAMILIES[family.doc_row]
        assert owner.doc_row is None, f"{name}: its row's family {owner.name} must have a row of its own"


def test_an_unknown_generated_region_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown generated region"):
        rewrite("<!-- generated: nonsense (python -m tool_parsers._docs) -->\nx\n<!-- end generated -->")
