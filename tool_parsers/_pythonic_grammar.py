"""The grammar of pythonic calls (``[f(city="Paris", days=3), g()]``), typed by each tool's schema.

XGrammar ships no pythonic argument style, so each call is an EBNF ``grammar`` element:
``name(`` then the keyword arguments in the schema's property order (required ones present,
optional ones may be left out, no others), then ``)``. Each value's grammar is XGrammar's own
JSON-schema grammar for that property (every constraint it enforces for JSON, nested objects
and arrays included), with JSON's spellings turned into Python's: ``true`` / ``false`` /
``null`` become ``True`` / ``False`` / ``None``, strings stay double-quoted but may not use
JSON's ``\\/`` escape (Python reads it as two characters), and a string may be followed by
``)``. A JSON object is a valid Python dict literal, a JSON array a valid list.
Whitespace is fixed: ``, `` between arguments, ``=`` without spaces, JSON values compact.
"""
from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import cast

from .base import JsonValue

__all__ = ["call_grammar", "python_literal", "UnsupportedSchema"]

# EBNF tokens: string literals, character classes, names, anything else one character at a time
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[A-Za-z_][A-Za-z0-9_]*|.', re.S)
_CALL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")  # what the parser reads as a function name
_RULE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*) ::=", re.M)
_JSON_ESCAPE = '[\\"\\\\/bfnrt]'  # XGrammar's basic_escape: \/ is JSON only
_PY_ESCAPE = '[\\"\\\\bfnrt]'
_AFTER_STRING = "[,}\\]:]"  # what may follow a JSON string (XGrammar's lookahead); in a call, ")" too
_PY_AFTER_STRING = "[,}\\]:)]"
_TOP_LEVEL_ONLY = ("anyOf", "oneOf", "allOf", "$ref", "not", "if", "patternProperties", "propertyNames",
                   "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "unevaluatedProperties")


class UnsupportedSchema(ValueError):
    """A tool's ``parameters`` that keyword arguments cannot express exactly (the message says why)."""


def python_literal(value: JsonValue) -> str:
    """``value`` (JSON data) written as the Python literal the grammar makes the model write."""
    if value is True or value is False or value is None:
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {python_literal(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def _has_json_names(value: JsonValue) -> bool:
    if value is True or value is False or value is None:
        return True
    if isinstance(value, list):
        return any(_has_json_names(v) for v in value)
    if isinstance(value, dict):
        return any(_has_json_names(v) for v in value.values())
    return False


def _pythonic_terminal(token: str) -> str:
    """An EBNF string terminal whose text is a JSON value with ``true``/``false``/``null`` in it,
    written in Python's spelling (terminals that are fragments of JSON stay as they are)."""
    try:
        text = ast.literal_eval(token)
        value = json.loads(text)
    except (ValueError, SyntaxError):
        return token
    if not _has_json_names(value):
        return token
    return json.dumps(python_literal(value), ensure_ascii=False)


def _value_rules(schema: JsonValue, prefix: str, shared: dict[str, str]) -> str:
    """XGrammar's grammar for one JSON value of ``schema``, in Python's spelling, its rules
    renamed with ``prefix`` (its start rule is ``<prefix>root``). Its ``basic_*`` rules (JSON's
    own strings, numbers, ...) are kept once in ``shared`` when they are the same for every value."""
    import xgrammar as xgr

    ebnf = str(xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False, strict_mode=True))
    names = set(_RULE.findall(ebnf))
    for share in (True, False):
        out = []
        for tok in _TOKEN.findall(ebnf):
            if tok in names:
                out.append(tok if share and tok.startswith("basic_") else prefix + tok)
            elif tok.startswith('"') and len(tok) > 1:
                out.append(_pythonic_terminal(tok))
            elif tok == _JSON_ESCAPE:
                out.append(_PY_ESCAPE)
            elif tok == _AFTER_STRING:
                out.append(_PY_AFTER_STRING)
            else:
                out.append(tok)
        lines = [line for line in "".join(out).splitlines() if line.strip()]
        basics = {line.split(" ::=", 1)[0]: line for line in lines if line.startswith("basic_")}
        if share and any(shared.get(k, line) != line for k, line in basics.items()):
            continue  # this value's basic rules differ: keep its own copies
        new = [line for line in lines if not (share and line.startswith("basic_"))]
        if share:
            new += [line for k, line in basics.items() if k not in shared]
            shared.update(basics)
        return "\n".join(new)
    raise AssertionError("unreachable")


def _ebnf_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def call_grammar(name: str, schema: JsonValue) -> str:
    """EBNF (start rule ``root``) for one call of ``name`` whose arguments follow ``schema``
    (an object schema, as the constraint builder normalised it). :class:`UnsupportedSchema` for a
    top level keyword arguments cannot express."""
    if not _CALL_NAME.fullmatch(name):
        raise UnsupportedSchema("a pythonic call's name starts with a letter or '_' (then letters, digits, '_', '.', '-')")
    schema = schema if isinstance(schema, Mapping) else {"type": "object"}
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties", not props)
    if not isinstance(props, Mapping):
        raise UnsupportedSchema("its properties are not an object")
    for key in _TOP_LEVEL_ONLY:
        if key in schema:
            raise UnsupportedSchema(f"pythonic calls take keyword arguments, which cannot express {key!r} at its top level")
    required = set(cast("list[str]", schema.get("required") or ()))  # the meta-schema checked: a list of names
    if missing := sorted(required - set(props)):
        raise UnsupportedSchema(f"it requires {', '.join(missing)} without declaring them in its properties")
    if props and extra not in (False, None) and extra != {}:
        raise UnsupportedSchema("keyword arguments are either its declared properties or free-form, not both")
    defs: dict[str, JsonValue] = {k: schema[k] for k in ("$defs", "definitions") if k in schema}
    rules = [f"root ::= {_ebnf_string(name + '(')} args {_ebnf_string(')')}"]
    if not props:
        if extra is False or extra is None:
            rules.append('args ::= ""')  # parameterless: exactly name()
        else:  # free-form: any keyword arguments
            value = extra if isinstance(extra, (Mapping, bool)) else True
            rules.append(_value_rules({**value, **defs} if isinstance(value, Mapping) else value, "v_", {}))
            rules.append('kwarg ::= [A-Za-z_] [A-Za-z0-9_]* "=" v_root')
            rules.append('args ::= "" | kwarg (", " kwarg)*')
        return "\n".join(rules)
    keys = list(props)
    for key in keys:
        if not key.isidentifier():
            raise UnsupportedSchema(f"its property {key!r} is not a Python keyword argument name")
    rules.append("args ::= s0")
    shared: dict[str, str] = {}
    for i, key in enumerate(keys):
        sub = props[key]
        sub = {**sub, **defs} if isinstance(sub, Mapping) and defs else sub
        rules.append(_value_rules(sub, f"p{i}_", shared))
        kwarg = f"{_ebnf_string(key + '=')} p{i}_root a{i + 1}"
        optional = key not in required
        rules.append(f"s{i} ::= {kwarg}" + (f" | s{i + 1}" if optional else ""))
        rules.append(f"a{i} ::= {_ebnf_string(', ')} {kwarg}" + (f" | a{i + 1}" if optional else ""))
    rules.append(f's{len(keys)} ::= ""')
    rules.append(f'a{len(keys)} ::= ""')
    return "\n".join(rules)
