"""``$ref`` in user schemas: only inside the document, and never a loop that produces nothing.

A schema is user input, so it must never make the server reach the network or the file
system: a ``$ref`` to ``http://``, ``file://`` or any other document is refused (400 naming
the ``$ref``), and every validator the server builds has an empty registry, so nothing is
ever retrieved even if a reference slipped through. A ``$ref`` cycle that consumes no input
(``{"$ref": "#"}``, a -> b -> a, or through ``allOf``) describes no finite value; the grammar
for it accepts nothing, so the request is refused instead of answering an empty string.
"""
from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import unquote

from jsonschema import Draft202012Validator
from referencing import Registry

from server.json_types import JsonMapping, JsonObject, JsonValue

__all__ = ["ref_tokens", "RefProblem", "check_refs", "escape_token", "local_validator", "resolve_ref"]

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
               "unevaluatedItems", "unevaluatedProperties", "additionalItems")


class RefProblem(ValueError):
    """A ``$ref`` the server will not follow; ``pointer`` is where it is written."""

    def __init__(self, message: str, pointer: str) -> None:
        super().__init__(message)
        self.pointer = pointer


def escape_token(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _walk(node: JsonValue, pointer: str = "") -> Iterator[tuple[str, JsonObject]]:
    """Every subschema (dict) with its JSON pointer."""
    if not isinstance(node, dict):
        return
    yield pointer, node
    for key in _SCHEMA_MAPS:
        sub = node.get(key)
        if isinstance(sub, dict):
            for name, child in sub.items():
                yield from _walk(child, f"{pointer}/{key}/{escape_token(str(name))}")
    for key in _SCHEMA_LISTS:
        sub = node.get(key)
        if isinstance(sub, list):
            for i, child in enumerate(sub):
                yield from _walk(child, f"{pointer}/{key}/{i}")
    for key in _SCHEMA_ONE:
        yield from _walk(node.get(key), f"{pointer}/{key}")
    items = node.get("items")
    if isinstance(items, list):  # draft-07 tuple form
        for i, child in enumerate(items):
            yield from _walk(child, f"{pointer}/items/{i}")


def ref_tokens(ref: str) -> list[str]:
    """The tokens of a ``$ref``'s JSON pointer (``#/a/b`` -> ``["a", "b"]``; what follows ``#`` in
    any reference), each percent-decoded (RFC 3986), then unescaped (``~1`` -> ``/``, ``~0`` -> ``~``)."""
    fragment = ref.partition("#")[2]
    return [unquote(raw).replace("~1", "/").replace("~0", "~") for raw in fragment.removeprefix("/").split("/")]


def resolve_ref(root: JsonValue, ref: str) -> tuple[str, JsonValue] | None:
    """The one JSON-pointer resolver: a local ``$ref`` (``#`` or ``#/a/b``) as (its canonical
    RFC 6901 pointer, the node it points at), or None when it is not a local pointer or points
    at nothing. A URI fragment is percent-decoded first (RFC 3986), then each token unescaped
    (``~1`` -> ``/``, ``~0`` -> ``~``), as JSON Schema resolves ``$ref``."""
    if ref == "#":
        return "", root
    if not ref.startswith("#/"):
        return None
    node = root
    tokens = ref_tokens(ref)
    for tok in tokens:
        if isinstance(node, dict) and tok in node:
            node = node[tok]
        elif isinstance(node, list) and tok.isdigit() and int(tok) < len(node):
            node = node[int(tok)]
        else:
            return None
    return "/" + "/".join(escape_token(t) for t in tokens), node


def check_refs(schema: JsonValue) -> None:
    """Raise :class:`RefProblem` for a reference outside the document or a loop that consumes nothing."""
    nodes = list(_walk(schema))
    ids = {i.rstrip("#") for _, n in nodes if isinstance(i := n.get("$id"), str)}
    anchors = {a for _, n in nodes if isinstance(a := n.get("$anchor"), str)}
    for pointer, node in nodes:
        for key in ("$ref", "$dynamicRef"):
            ref = node.get(key)
            if ref is None:
                continue
            where = f"{pointer or '/'} ({key}: {ref!r})"
            if not isinstance(ref, str):
                raise RefProblem(f"{key} at {where} must be a string", pointer)
            base, _, fragment = ref.partition("#")
            if base and base not in ids:
                raise RefProblem(
                    f"{key} at {where} points outside this schema; only references inside the document "
                    "('#/$defs/...') are followed. Inline the referenced schema under $defs.", pointer)
            if not base and fragment and not fragment.startswith("/") and fragment not in anchors:
                raise RefProblem(f"{key} at {where} names an anchor this schema does not define", pointer)
    _check_cycles(schema, nodes)


def _check_cycles(root: JsonValue, nodes: list[tuple[str, JsonObject]]) -> None:
    by_id = {id(n): p for p, n in nodes}

    def successors(node: JsonObject) -> list[JsonObject]:
        out: list[JsonObject] = []
        ref = node.get("$ref")
        if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
            found = resolve_ref(root, ref)
            if found is not None and isinstance(found[1], dict):
                out.append(found[1])
        all_of = node.get("allOf")
        if isinstance(all_of, list):
            out += [child for child in all_of if isinstance(child, dict)]
        return out

    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for _, start in nodes:  # iterative depth-first search: a long chain must not exhaust the stack
        if id(start) in state:
            continue
        state[id(start)] = 1
        stack = [(start, iter(successors(start)))]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[id(node)] = 2
                stack.pop()
                continue
            mark = state.get(id(nxt))
            if mark == 1:
                where = by_id.get(id(nxt)) or "/"
                raise RefProblem(
                    f"$ref loop through {where} never produces a value (a schema that must match itself "
                    "with nothing in between); make the recursion go through a property or array item.", where)
            if mark is None:
                state[id(nxt)] = 1
                stack.append((nxt, iter(successors(nxt))))


def local_validator(schema: JsonMapping | bool) -> Draft202012Validator:
    """A validator that can never retrieve anything: its registry is empty."""
    return Draft202012Validator(schema, registry=Registry(), format_checker=Draft202012Validator.FORMAT_CHECKER)
