"""Exact rewrites: keywords no grammar compiler takes, spelled in keywords they do take.

Each rewrite keeps the set of valid instances (JSON Schema 2020-12, with format assertion as
python-jsonschema checks it) and is checked on MaskBench's dev half by ``python -m
evals.maskbench`` (0 too loose). ``normalize_schema`` applies them, so both backends and the
per-keyword report see the rewritten schema:

* ``not`` where its complement is a schema: ``not: {not: X}`` is ``X``; ``not: {}`` / ``not: true``
  is ``false``; ``not: {required: [a, b]}`` is "an object with a or b absent" (``properties: {a: false}``);
  ``not: {type: T}`` is the other types; ``not: {anyOf: [...]}`` is ``not`` of each branch;
* ``dependencies`` / ``dependentRequired`` / ``dependentSchemas``: "k absent, or k present and
  the rest holds" as an ``anyOf`` under ``allOf`` (draft 7's ``dependencies`` is enforced whatever
  ``$schema`` says: where 2020-12 reads it as an annotation, that is stricter, never looser);
* draft 4's boolean ``exclusiveMinimum`` / ``exclusiveMaximum`` as the later numeric form;
* ``type: number`` beside a whole-number ``multipleOf`` as ``integer`` (the same instances);
* array-form ``items`` with ``additionalItems`` (draft 2019 and older) as ``prefixItems`` /
  ``items``; ``additionalItems`` beside a single ``items`` schema has no effect;
* ``format`` values outside JSON Schema's format vocabulary are annotations: dropped;
* ``oneOf`` whose branches are pairwise disjoint (declared types, listed values, or a required
  property whose ``const`` / ``enum`` values differ; a local ``$ref`` read through, an ``anyOf`` /
  ``oneOf`` by its branches' types) is ``anyOf``;
* a keyword that applies to one type only, beside a ``type`` that excludes it (``properties`` /
  ``required`` on an array, ``minLength`` on an integer), has no effect: dropped. XGrammar 0.2.8
  applies object keywords to an array (``{"type": "array", "required": ["a"]}`` writes only ``[]``).
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field

from server.json_types import JsonArray, JsonObject, JsonValue, integral_numbers
from server.structured.schema_refs import ref_tokens, resolve_ref

__all__ = ["rewrite_schema", "ASSERTED_FORMATS"]

#: Formats a 2020-12 validator asserts (its format vocabulary); any other value is an annotation.
ASSERTED_FORMATS = frozenset({
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4", "ipv6",
    "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
    "relative-json-pointer", "regex",
})
_TYPES = ("null", "boolean", "object", "array", "number", "string")  # integer is inside number
_NOT_SUBSCHEMA_KEYS = frozenset({"enum", "const", "default", "examples"})  # values, not schemas


def rewrite_schema(schema: JsonValue) -> JsonValue:
    """A rewritten copy of ``schema`` (see the module docstring); anything else is kept as is."""
    return _rewrite(copy.deepcopy(schema), depth=0, kept=_ref_tokens(schema), root=schema)


def _ref_tokens(schema: JsonValue) -> frozenset[str]:
    """Every token of every ``$ref`` pointer in ``schema`` (a keyword a reference may lead through
    is never dropped: its subschemas may be reached that way, whatever ``type`` says)."""
    out: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                out.update(ref_tokens(ref))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(out)


def _rewrite(node: JsonValue, *, depth: int, kept: frozenset[str] = frozenset(), root: JsonValue = None) -> JsonValue:
    if depth > 200 or not isinstance(node, dict):  # nesting is capped before this runs
        return node
    for key, value in list(node.items()):
        if key in _NOT_SUBSCHEMA_KEYS:
            continue
        if isinstance(value, dict):
            if key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"):
                node[key] = {k: _rewrite(v, depth=depth + 1, kept=kept, root=root) for k, v in value.items()}
            else:
                node[key] = _rewrite(value, depth=depth + 1, kept=kept, root=root)
        elif isinstance(value, list) and key in ("allOf", "anyOf", "oneOf", "prefixItems", "items"):
            node[key] = [_rewrite(v, depth=depth + 1, kept=kept, root=root) for v in value]
    _drop_annotation_formats(node)
    _drop_inapplicable(node, kept)
    _draft4_bounds(node)
    _integral_multiples(node)
    _array_items(node)
    _dependencies(node)
    node = _eliminate_not(node)
    if isinstance(node, dict):
        _disjoint_one_of(node, root)
    return node


def _drop_annotation_formats(node: JsonObject) -> None:
    fmt = node.get("format")
    if isinstance(fmt, str) and fmt not in ASSERTED_FORMATS:
        node.pop("format")


#: Keywords that constrain only instances of one type (JSON Schema 2020-12's validation and applicator
#: vocabularies, and the drafts' older spellings), by that type.
_TYPE_KEYWORDS: dict[str, frozenset[str]] = {
    "object": frozenset({"properties", "patternProperties", "additionalProperties", "unevaluatedProperties",
                         "propertyNames", "required", "minProperties", "maxProperties", "dependentRequired",
                         "dependentSchemas", "dependencies"}),
    "array": frozenset({"items", "prefixItems", "additionalItems", "unevaluatedItems", "contains", "minContains",
                        "maxContains", "minItems", "maxItems", "uniqueItems"}),
    "string": frozenset({"minLength", "maxLength", "pattern", "format", "contentEncoding", "contentMediaType",
                         "contentSchema"}),
    "number": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}),
}


def _drop_inapplicable(node: JsonObject, kept: frozenset[str]) -> None:
    """Keywords of a type that ``type`` excludes: they hold for every instance, so they go (but
    not one named in a ``$ref``: ``kept``)."""
    types = _type_names(node.get("type"))
    if not types or not types <= {*_TYPES, "integer"}:
        return
    if "integer" in types:
        types = types | {"number"}
    for name, keywords in _TYPE_KEYWORDS.items():
        if name not in types:
            for k in (keywords & node.keys()) - kept:
                node.pop(k)


def _draft4_bounds(node: JsonObject) -> None:
    """Draft 4: ``exclusiveMinimum: true`` makes ``minimum`` exclusive (later drafts: a number)."""
    for flag, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = node.get(flag)
        if isinstance(value, bool):
            node.pop(flag)
            if value and bound in node:
                node[flag] = node.pop(bound)


def _integral_multiples(node: JsonObject) -> None:
    """A number that must be a multiple of a whole number is an integer (2020-12: a number with no
    fractional part, ``6.0`` included): ``type: number`` becomes ``integer`` beside such a
    ``multipleOf``, which XGrammar enforces exactly, negatives included, where llguidance 1.7 writes no
    negative multiple (guidance-ai/llguidance#222) and XGrammar ignores ``multipleOf`` on a number."""
    step = node.get("multipleOf")
    if isinstance(step, bool) or not isinstance(step, (int, float)) or step <= 0 or not float(step).is_integer():
        return
    types = node.get("type")
    if types == "number":
        node["type"] = "integer"
    elif isinstance(types, list) and "number" in types and all(isinstance(t, str) for t in types):
        node["type"] = list(dict.fromkeys("integer" if t == "number" else t for t in types))
    else:
        return
    if isinstance(step, float) and abs(step) < 2**53:
        node["multipleOf"] = int(step)


def _array_items(node: JsonObject) -> None:
    """Draft 2019 and older: ``items: [..]`` is ``prefixItems``, ``additionalItems`` the rest."""
    items = node.get("items")
    if isinstance(items, list) and "prefixItems" not in node:
        node["prefixItems"] = node.pop("items")
        if "additionalItems" in node:
            node["items"] = node.pop("additionalItems")
    elif "additionalItems" in node and not isinstance(items, list):
        node.pop("additionalItems")  # no effect beside a single items schema, or without items


def _absent(name: str) -> JsonObject:
    return {"properties": {name: False}}


def _dependencies(node: JsonObject) -> None:
    """``dependentRequired`` / ``dependentSchemas`` (and draft 7's ``dependencies``) as anyOf."""
    branches: JsonArray = []
    found = {k: deps for k in ("dependencies", "dependentRequired", "dependentSchemas")
             if isinstance(deps := node.get(k), dict)}
    for table in found.values():
        for name, then in table.items():
            if isinstance(then, list) and all(isinstance(n, str) for n in then):
                if then:
                    branches.append({"anyOf": [_absent(name), {"required": [name, *then]}]})
            elif then is False:
                branches.append(_absent(name))
            elif isinstance(then, dict):
                listed = then.get("required", [])
                required = [name, *[r for r in listed if r != name]] if isinstance(listed, list) else None
                if required is None:
                    return  # a malformed ``required``: leave the node to the backends' verdicts
                branches.append({"anyOf": [_absent(name), {**then, "required": required}]})
            elif then is not True:
                return  # not a dependency the spec knows: leave the node alone
    all_of = _listed(node.get("allOf", []))
    if all_of is None:
        return  # a malformed ``allOf`` (not a list): leave the node to the meta-schema's verdict
    for key in found:
        node.pop(key)
    if branches:
        node["allOf"] = [*all_of, *branches]


def _complement(sub: JsonValue) -> JsonValue | None:
    """A schema for ``not: sub``, or None when it has no simple exact form."""
    if sub is True or sub == {}:
        return False
    if sub is False:
        return True
    if not isinstance(sub, dict):
        return None
    keys = set(sub) - {"title", "description", "$comment"}
    if keys == {"not"}:
        return sub["not"]
    if keys == {"required"} and isinstance(sub["required"], list) and sub["required"]:
        names = [n for n in sub["required"] if isinstance(n, str)]
        if len(names) != len(sub["required"]):
            return None
        # ``required`` holds for every non-object, so only an object can fail it
        absent: JsonObject = _absent(names[0]) if len(names) == 1 else {"anyOf": [_absent(n) for n in names]}
        return {"type": "object", **absent}
    if keys == {"type"}:
        t = sub["type"]
        types = _type_names(t)
        if types is None or ("integer" in types and "number" not in types):
            return None  # "not integer" leaves fractional numbers: no type says that
        rest: JsonArray = [x for x in _TYPES if x not in types and not (x == "number" and "number" in types)]
        return {"type": rest} if rest else False
    if keys == {"anyOf"} and isinstance(sub["anyOf"], list):
        parts = [_complement(b) for b in sub["anyOf"]]
        if any(p is None for p in parts):
            return None
        if any(p is False for p in parts):
            return False
        kept = [p for p in parts if p is not True]
        return {"allOf": kept} if kept else True
    return None


def _eliminate_not(node: JsonObject) -> JsonValue:
    if "not" not in node:
        return node
    replacement = _complement(node["not"])
    all_of = _listed(node.get("allOf", []))
    if replacement is None or all_of is None:  # (a malformed ``allOf``: left to the meta-schema's verdict)
        return node
    node.pop("not")
    if replacement is False:
        return False
    if replacement is True:
        return node
    if not (set(node) - {"title", "description", "$comment", "$schema", "$id"}):
        return {**{k: v for k, v in node.items() if k in ("$schema", "$id")}, **replacement} \
            if isinstance(replacement, dict) else replacement
    node["allOf"] = [*all_of, replacement]
    return node


def _listed(value: JsonValue) -> JsonArray | None:
    """``value`` when it is a list (as the meta-schema checks ``allOf``), else None: a schema under
    a keyword no meta-schema checked (an unknown keyword, one of another draft) may hold anything,
    and a walk leaves such a node as it is rather than read it as something else."""
    return value if isinstance(value, list) else None


def _type_names(value: JsonValue) -> set[str] | None:
    """The type names ``type`` lists (a name or a list of names); None for any other value."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, list) and all(isinstance(t, str) for t in value):
        return {t for t in value if isinstance(t, str)}
    return None


@dataclass(frozen=True)
class _Facts:
    """What every instance a ``oneOf`` branch accepts has in common (each part None: unknown)."""

    types: frozenset[str] | None = None  # its JSON types ("integer" wherever "number" is)
    values: frozenset[str] | None = None  # the only values it accepts (``const`` / ``enum``), canonical JSON
    keys: dict[str, frozenset[str]] = field(default_factory=dict)  # per required property, its allowed values

    def both(self, other: _Facts) -> _Facts:
        """The facts of an instance that both describe."""
        keys = dict(self.keys)
        for name, allowed in other.keys.items():
            keys[name] = keys[name] & allowed if name in keys else allowed
        return _Facts(_meet(self.types, other.types), _meet(self.values, other.values), keys)


def _meet(a: frozenset[str] | None, b: frozenset[str] | None) -> frozenset[str] | None:
    return b if a is None else a if b is None else a & b


def _canonical(value: JsonValue) -> str:
    """``value`` as JSON that is equal exactly when the values are (``1`` and ``1.0`` alike)."""
    return json.dumps(integral_numbers(value), sort_keys=True)


def _value_type(text: str) -> str:
    value = json.loads(text)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "integer" if isinstance(value, int) else "number"
    return "string" if isinstance(value, str) else "array" if isinstance(value, list) else "object"


#: Schemas one ``oneOf``'s facts may read (its branches, what they reference, their branches): past it, unknown.
_FACTS_BUDGET = 256


def _branch_facts(branch: JsonValue, root: JsonValue, budget: list[int]) -> _Facts:
    """What every instance ``branch`` accepts has in common: its own ``type``, ``const`` / ``enum``
    and required discriminators, those of the schema a local ``$ref`` names, and the types of its
    ``anyOf`` / ``oneOf`` branches (all known); sound, never complete. ``budget``: schemas left to
    read (a cycle of references, or a wide tree, ends as unknown)."""
    if branch is False:
        return _Facts(types=frozenset())
    budget[0] -= 1
    if not isinstance(branch, dict) or budget[0] < 0:  # (``true``, a malformed node, the budget spent)
        return _Facts()
    names = _type_names(branch.get("type"))  # (a malformed ``type``: any, so never disjoint)
    types = None if names is None else frozenset(names | ({"integer"} if "number" in names else set()))
    values = frozenset([_canonical(branch["const"])]) if "const" in branch else None
    enum = branch.get("enum")
    if isinstance(enum, list):
        values = _meet(values, frozenset(_canonical(v) for v in enum))
    keys: dict[str, frozenset[str]] = {}
    declared = branch.get("properties")
    props: JsonObject = declared if isinstance(declared, dict) else {}
    required = branch.get("required")
    for name in required if isinstance(required, list) else []:
        if not isinstance(name, str):  # never a property name (only where no meta-schema checked it)
            continue
        sub = props.get(name)
        if isinstance(sub, dict):
            listed = [sub["const"]] if "const" in sub else sub.get("enum")
            if isinstance(listed, list):
                keys[name] = frozenset(_canonical(v) for v in listed)
    facts = _Facts(types, values, keys)
    ref = branch.get("$ref")
    if isinstance(ref, str):
        target = resolve_ref(root, ref)
        if target is not None:
            facts = facts.both(_branch_facts(target[1], root, budget))
    for key in ("anyOf", "oneOf"):
        subs = _listed(branch.get(key))
        if subs:
            each = [_branch_facts(sub, root, budget).types for sub in subs]
            if all(t is not None for t in each):
                facts = facts.both(_Facts(types=frozenset().union(*(t for t in each if t is not None))))
    return facts


def _disjoint(a: _Facts, b: _Facts) -> bool:
    if a.types is not None and b.types is not None and not (a.types & b.types):
        return True
    if a.values is not None and b.values is not None and not (a.values & b.values):
        return True
    for x, y in ((a, b), (b, a)):
        if x.values is not None and y.types is not None and all(_value_type(v) not in y.types for v in x.values):
            return True
    # both must be objects for a required discriminator to apply to every instance they accept
    objects = a.types == {"object"} and b.types == {"object"}
    return objects and any(name in b.keys and not (a.keys[name] & b.keys[name]) for name in a.keys)


def _disjoint_one_of(node: JsonObject, root: JsonValue) -> None:
    branches = node.get("oneOf")
    if not isinstance(branches, list) or len(branches) < 2 or "anyOf" in node:
        return
    budget = [_FACTS_BUDGET]
    facts = [_branch_facts(b, root, budget) for b in branches]
    if all(_disjoint(facts[i], facts[j]) for i in range(len(facts)) for j in range(i + 1, len(facts))):
        node["anyOf"] = node.pop("oneOf")
