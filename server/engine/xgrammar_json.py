"""XGrammar's JSON grammars with length-bounded strings that stay JSON strings, and compact any-values.

XGrammar 0.2 lowers a string with ``minLength`` / ``maxLength`` to ``"`` C{min,max} ``"`` over one
character class, ``[^"\\\r\n]`` (mlc-ai/xgrammar#800, open upstream), which lets raw control
characters other than CR and LF in (a tab, ``\x1a``): no JSON parser reads the result
(``json.loads``: "Invalid control character"; pydantic, so the OpenAI SDK's ``parse``), though the
grammar "matched the schema". A model that likes tabs writes them there.

Every XGrammar grammar gramserve compiles from a JSON schema (a response format, a tool call's
arguments in a structural tag) goes through :func:`fixed_ebnf`: that class becomes
:data:`BOUNDED_STRING_CHAR`, the same class without the C0 controls, so every answer is JSON. The
other half of the upstream defect stays: no escape can be written inside such a string (a quote, a
backslash, a newline), a stricter grammar, never a looser one. An escape alternative in the rule
(one JSON character per repetition) was tried: XGrammar then cannot precompute the rule's token
masks and fills them at run time, 16-130 ms a token on SmolLM2's vocabulary against 2-130 µs.

In the XML call styles a bounded string parameter is raw text, which XGrammar lets hold anything, its
own closing tag included (an unbounded one excludes the tag): a model could end the value early and
write on, and the family's parser would read a shorter value than the grammar counted. There it
becomes :data:`BOUNDED_RAW_CHAR`, anything but ``<`` (stricter: a bounded XML value cannot hold a
``<``).

XGrammar 0.2.8 also ignores compact separators inside a value that may be any JSON (``{}``, an array
without ``items``, an object's other properties, ``json_object``): asked for ``(",", ":")``, as vLLM
asks whenever whitespace is off (gramserve's engine: always), it writes ``", "`` between such an
array's items and an object's members while every typed part of the same answer is compact
(mlc-ai/xgrammar#945, fixed upstream after 0.2.8, not released). A model writing ``,"`` is refused
that token inside the value, and a compact text of a valid document is not in the grammar (MaskBench:
19 of the dev half's schemas). :func:`fix_any_separators` gives those two rules the requested
separator, so a compact JSON spec is also compiled from the fixed EBNF.

A spec with nothing to fix (no ``minLength`` / ``maxLength`` in its text, and, for a JSON schema,
whitespace allowed) is compiled as vLLM compiles it, untouched; one with them compiles and fills its
masks as fast as XGrammar's own.

Used by the engine's backend (``server/engine/hybrid_backend.py``) and by the API process's mirror
of it (``server/structured/grammar_cache.compile_constraint``), so both compile the same grammar.
"""
from __future__ import annotations

import re

from server.lru import BoundedLRU

__all__ = ["BOUNDED_RAW_CHAR", "BOUNDED_STRING_CHAR", "JSON_OBJECT_SCHEMA", "fix_any_separators", "fix_bounded_strings",
           "fixed_ebnf", "fixes_needed"]

#: The class of a length-bounded JSON string's characters as gramserve lets XGrammar write them:
#: anything but the C0 controls, the quote and the backslash (no escapes: see the module docstring).
BOUNDED_STRING_CHAR = '[^\\0-\\x1f\\"\\\\]'
# XGrammar's class for them (in a rule of its own, or inline where the bounds are small)
_XGRAMMAR_BOUNDED_CLASS = '[^\\"\\\\\\r\\n]'
# The printed grammar's quoted terminals and character classes, each read whole (a ``Regex("...")``'s
# pattern or a constant may spell anything; a class may hold a quote)
_TERMINAL_OR_CLASS = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]')
#: One character of a length-bounded string parameter in an XML call style (qwen_xml, minimax_xml,
#: glm_xml, deepseek_xml, kimi_k3_xml): not ``<``, which begins every such style's closing tag.
BOUNDED_RAW_CHAR = "[^<]"
# XGrammar's rule for it (any character, the closing tag included; an unbounded value excludes the
# tag): the repeated character's rule, or the value's own where at most one character is allowed
_BOUNDED_RAW_RULE = re.compile(r'^(\S+) ::= (\(\(|\(""\ \|\ \()\[\\0-\\U0010ffff\](\)\))$', re.M)
_BOUNDS = ("minLength", "maxLength")
#: The schema vLLM compiles for ``json_object`` (``response_format: {"type": "json_object"}``).
JSON_OBJECT_SCHEMA = '{"type": "object"}'
# XGrammar's any-value rules' separator between items / members, whatever separator was asked for
_ANY_SEPARATOR = re.compile(r'^(basic_array_items|basic_object_properties) ::= \(\(", " ', re.M)

# (kind, whitespace, spec) -> the fixed EBNF, or "" where XGrammar's own grammar needs no fix.
_FIXED: BoundedLRU[tuple[str, str, str], str] = BoundedLRU(max_entries=256, max_chars=16 << 20)


def fixes_needed(spec: str) -> bool:
    """Whether ``spec`` (a JSON schema's or a structural tag's text) may hold a bounded string."""
    return any(k in spec for k in _BOUNDS)


def fix_any_separators(ebnf: str, comma: str) -> str:
    """``ebnf`` (XGrammar's printed grammar of a JSON schema) with its any-value array items and
    object members separated by ``comma`` (the separator asked for) instead of ``", "``."""
    quoted = '"' + comma.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return _ANY_SEPARATOR.sub(lambda m: f"{m[1]} ::= (({quoted} ", ebnf)


def fix_bounded_strings(ebnf: str, *, xml: bool = False) -> str:
    """``ebnf`` (XGrammar's printed grammar) with each bounded JSON string's character class made
    :data:`BOUNDED_STRING_CHAR`, and (``xml``: a structural tag's, where XML call styles live) each
    bounded raw string's :data:`BOUNDED_RAW_CHAR`."""
    ebnf = _TERMINAL_OR_CLASS.sub(lambda m: BOUNDED_STRING_CHAR if m[0] == _XGRAMMAR_BOUNDED_CLASS else m[0], ebnf)
    return _BOUNDED_RAW_RULE.sub(lambda m: f"{m[1]} ::= {m[2]}{BOUNDED_RAW_CHAR}{m[3]}", ebnf) if xml else ebnf


def fixed_ebnf(kind: str, spec: str, *, any_whitespace: bool = True,
               separators: tuple[str, str] | None = None) -> str | None:
    """The EBNF to compile instead of ``spec`` (``kind`` "json": a JSON schema's text, compiled as
    ``compile_json_schema(spec, any_whitespace=..., separators=...)``; "structural_tag": a
    structural tag's text), or None: compile ``spec`` as it is (nothing to fix, or XGrammar refuses
    it, which the plain compile then reports). Per process, bounded."""
    compact = kind == "json" and separators is not None and separators[0] != ", "
    if kind not in ("json", "structural_tag") or not (compact or fixes_needed(spec)):
        return None
    key = (kind, f"{any_whitespace}{separators}", spec)
    found = _FIXED.get(key)
    if found is None:
        import xgrammar as xgr

        try:
            grammar = (xgr.Grammar.from_json_schema(spec, any_whitespace=any_whitespace, separators=separators)
                       if kind == "json" else xgr.Grammar.from_structural_tag(spec))
        except Exception:  # noqa: BLE001 - XGrammar's refusal, of any type
            return None  # (not kept: the plain compile raises XGrammar's own error)
        printed = str(grammar)
        fixed = fix_bounded_strings(printed, xml=kind == "structural_tag")
        if compact and separators is not None:
            fixed = fix_any_separators(fixed, separators[0])
        found = fixed if fixed != printed else ""
        _FIXED.put(key, found)
    return found or None
