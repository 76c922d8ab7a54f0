"""server/engine/xgrammar_json.py: XGrammar's length-bounded strings stay JSON strings, on the API
process's compile and on the engine backend's, for response formats and tool calls' arguments.

The judge is python's own: a text is right when ``json.loads`` reads it and python-jsonschema says
it fits; a bounded string with an escape is refused (stricter, as XGrammar's own grammar is)."""
from __future__ import annotations

import json
import re
import threading
from typing import Any

import jsonschema
import pytest
import xgrammar as xgr

from server.engine.hybrid_backend import hybrid_backend_class
from server.engine.xgrammar_json import BOUNDED_STRING_CHAR, fix_any_separators, fix_bounded_strings, fixed_ebnf
from server.lru import BoundedLRU
from server.structured.constraints import Constraint
from server.structured.grammar_cache import compile_constraint
from server.structured.tool_grammar import resolve_format, tool_call_format

BOUNDED = {"type": "object", "properties": {"a": {"type": "string", "minLength": 1, "maxLength": 3}},
           "required": ["a"], "additionalProperties": False}
# (the value of "a" as written in the answer's text)
VALUES = ['"x"', '"xyz"', '"wxyz"', '""', '"a\tb"', '"\x1a"', '"a\nb"', '"\x00"', '"\\t"', '"\\"\\\\"',
          '"\\u00e9x"', '"\\n\\n\\n\\n"', '"é😀"', '"é😀a"', '"\\ud83d\\ude00"', '"\\ud83d\\ude00\\ud83d\\ude00x1"',
          '"\\q"', '"\\u12"', '"\x7f"']


def _python_says(text: str, schema: Any) -> bool:
    """Whether ``text`` is JSON that fits ``schema``, and writable without an escape in the bounded string."""
    if "\\" in text:
        return False
    try:
        value = json.loads(text)  # strict: a raw control character in a string is not JSON
    except ValueError:
        return False
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def _accepts(compiled: xgr.CompiledGrammar) -> Any:
    matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)

    def accepts(text: str) -> bool:
        matcher.reset()
        return bool(matcher.accept_string(text)) and matcher.is_terminated()

    return accepts


@pytest.fixture(scope="module")
def compiler() -> xgr.GrammarCompiler:
    return xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)


@pytest.mark.parametrize("compact", [True, False])
def test_a_response_formats_bounded_string_is_a_json_string(compiler, compact) -> None:
    accepts = _accepts(compile_constraint(compiler, Constraint("json", BOUNDED), disable_any_whitespace=compact))
    for value in VALUES:
        text = '{"a":' + value + "}"
        assert accepts(text) == _python_says(text, BOUNDED), text


def test_xgrammars_own_grammar_was_not(compiler) -> None:
    """The defect fixed (mlc-ai/xgrammar#800): if this fails, XGrammar fixed it and the fix can go."""
    accepts = _accepts(compiler.compile_json_schema(json.dumps(BOUNDED), any_whitespace=False, separators=(",", ":")))
    assert accepts('{"a":"a\tb"}') and accepts('{"a":"\x1a"}')


def test_a_tool_calls_bounded_argument_is_a_json_string(compiler) -> None:
    fmt = tool_call_format(resolve_format("hermes"), [("note", BOUNDED)], mode="required", parallel=False)
    accepts = _accepts(compile_constraint(compiler, Constraint("structural_tag", {"type": "structural_tag",
                                                                                  "format": fmt})))
    call = '<tool_call>\n{"name": "note", "arguments": {"a": %s}}\n</tool_call>'
    for value in VALUES:
        assert accepts(call % value) == _python_says('{"a":' + value + "}", BOUNDED), value


def test_only_the_bounded_strings_rule_changes() -> None:
    assert fixed_ebnf("json", json.dumps({"type": "string", "pattern": "^a"})) is None  # nothing bounded: vLLM's compile
    assert fixed_ebnf("regex", "a{1,3}") is None
    assert fixed_ebnf("json", '{"type": "string", "minLength": "x"}') is None  # XGrammar's refusal: the plain compile's
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5},
                                                          "b": {"type": "array", "items": {"type": "string", "minLength": 2}},
                                                          "c": {"$ref": "#/definitions/non-empty.string"}},
                         "definitions": {"non-empty.string": {"type": "string", "minLength": 1}}})  # (a rule name with "-")
    own = str(xgr.Grammar.from_json_schema(schema)).splitlines()
    fixed = (fixed_ebnf("json", schema) or "").splitlines()
    changed = [(a, b) for a, b in zip(own, fixed, strict=True) if a != b]
    assert len(changed) == 3 and all(b.replace(BOUNDED_STRING_CHAR, "") == a.replace('[^\\"\\\\\\r\\n]', "")
                                     for a, b in changed)
    assert fix_bounded_strings("\n".join(fixed)) == "\n".join(fixed)


@pytest.fixture
def backend(hf_model_dir) -> Any:
    """The engine's backend over SmolLM2's vocabulary, without an engine (its XGrammar half)."""
    from transformers import AutoTokenizer

    from server.structured.grammar_cache import tokenizer_info_from_hf

    tokenizer = AutoTokenizer.from_pretrained(str(hf_model_dir))
    made = object.__new__(hybrid_backend_class())
    made.compiler = xgr.GrammarCompiler(tokenizer_info_from_hf(tokenizer))
    made.disable_any_whitespace, made.vocab_size, made.num_speculative_tokens = False, len(tokenizer), 0
    made._guidance, made._guidance_lock, made._templates = None, threading.Lock(), BoundedLRU(max_entries=4)
    made.tokenizer_ = tokenizer
    return made


def test_the_engines_backend_compiles_the_fixed_grammar(backend) -> None:
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    tab = backend.tokenizer_.convert_tokens_to_ids("ĉ")  # byte-level BPE's tab
    assert backend.tokenizer_.decode([tab]) == "\t"
    fmt = tool_call_format(resolve_format("hermes"), [("note", BOUNDED)], mode="required", parallel=False)
    for kind, spec, head in [(StructuredOutputOptions.JSON, json.dumps(BOUNDED), '{"a": "x'),
                             (StructuredOutputOptions.STRUCTURAL_TAG, json.dumps({"type": "structural_tag", "format": fmt}),
                              '<tool_call>\n{"name": "note", "arguments": {"a": "x')]:
        grammar = backend.compile_grammar(kind, spec)
        assert grammar.matcher.accept_string(head)
        assert not grammar.matcher.accept_token(tab), kind  # a raw tab cannot be written inside the string
        assert grammar.matcher.accept_string('y"'), kind  # a character and the string's end can


_NEGATED_CLASS = re.compile(r'\[\^(?:\\.|[^\]\\])*\]')


def _loose_classes(ebnf: str) -> set[str]:
    """The negated character classes of ``ebnf`` that let a C0 control character in (outside
    ``Regex(...)``, which XGrammar writes JSON-aware)."""
    lines = [line for line in ebnf.splitlines() if "Regex(" not in line]
    return {m for line in lines for m in _NEGATED_CLASS.findall(line) if not m.startswith("[^\\0-\\x1f")}


_S = {"type": "string", "minLength": 1, "maxLength": 9}
# Each place XGrammar lowers a bounded string: the root, a property, items, prefixItems, a $ref, a
# branch of anyOf, another property's value, an array of arrays, a nullable type list.
LOWERINGS = [_S, {"type": "object", "properties": {"a": _S}}, {"type": "array", "items": _S},
             {"type": "array", "prefixItems": [_S, {"type": "integer"}]},
             {"type": "object", "properties": {"a": {"$ref": "#/$defs/s-1"}}, "$defs": {"s-1": _S}},
             {"anyOf": [_S, {"type": "integer"}]}, {"type": "object", "additionalProperties": _S},
             {"type": "array", "items": {"type": "array", "items": _S}}, {"type": ["string", "null"], "maxLength": 3},
             # small bounds, which XGrammar writes out inline
             {"type": "string", "maxLength": 1}, {"type": "string", "minLength": 1, "maxLength": 1},
             {"type": ["string", "null"], "maxLength": 1}, {"type": "string", "minLength": 2, "maxLength": 2}]


@pytest.mark.parametrize("schema", LOWERINGS, ids=range(len(LOWERINGS)))
def test_every_lowering_of_a_bounded_string_keeps_control_characters_out(schema) -> None:
    text = json.dumps(schema)
    assert _loose_classes(str(xgr.Grammar.from_json_schema(text)))  # XGrammar's own (the check can fail)
    assert not _loose_classes(fixed_ebnf("json", text) or "")


def test_no_vendored_schemas_xgrammar_grammar_lets_a_raw_control_character_into_a_string() -> None:
    """Over every vendored JSONSchemaBench schema the request path gives XGrammar, each negated
    character class left in its grammar keeps the C0 controls out."""
    from server.errors import APIError
    from server.structured.from_request import build
    from server.structured.spec import ConstraintSpec
    from tests.testdata import VENDORED

    checked = bounded = 0
    for path in sorted((VENDORED / "jsonschemabench").glob("*/*.json")):
        schema = json.loads(path.read_text())["schema"]
        spec = ConstraintSpec(response_format={"type": "json_schema", "json_schema": {"schema": schema, "strict": True}})
        try:
            c = build(spec).constraint
        except APIError:
            continue  # refused
        if c is None or c.backend != "xgrammar" or c.kind != "json":
            continue
        text = json.dumps(c.value)
        ebnf = fixed_ebnf("json", text, any_whitespace=False, separators=(",", ":"))
        bounded += ebnf is not None
        assert not _loose_classes(ebnf or str(xgr.Grammar.from_json_schema(text, any_whitespace=False,
                                                                          separators=(",", ":")))), path.name
        checked += 1
    assert checked >= 10 and bounded >= 2, (checked, bounded)


def test_a_bounded_xml_parameter_cannot_hold_its_closing_tag(compiler) -> None:
    """In the XML call styles a bounded string parameter is raw text: XGrammar let it hold its own
    closing tag (a value closed early and written on, which the parser reads short); now no ``<``."""
    from server.structured.tool_grammar import tool_formats

    bounded = {"type": "object", "properties": {"a": {"type": "string", "minLength": 3, "maxLength": 40}},
               "required": ["a"]}
    fmt = tool_call_format(resolve_format("qwen3_coder"), [("f", bounded)], mode="required", parallel=False)
    tag = json.dumps({"type": "structural_tag", "format": fmt})
    accepts = _accepts(compile_constraint(compiler, Constraint("structural_tag", json.loads(tag))))
    own = _accepts(compiler.compile_structural_tag(tag))
    call = "<tool_call>\n<function=f>\n<parameter=a>%s</parameter>\n</function>\n</tool_call>"
    early = call % "ab</parameter>cd"  # the parser reads "ab": shorter than minLength
    assert own(early) and not accepts(early)
    assert accepts(call % "a\tb c") and accepts(call % "abc") and not accepts(call % "ab") and not accepts(call % "a<b")
    for bounds in ({"maxLength": 1}, {"minLength": 1, "maxLength": 1}):  # (the value's own rule: one character)
        one = {"type": "object", "properties": {"a": {"type": "string", **bounds}}, "required": ["a"]}
        tag = json.dumps({"type": "structural_tag", "format": tool_call_format(
            resolve_format("qwen3_coder"), [("f", one)], mode="required", parallel=False)})
        accepts = _accepts(compile_constraint(compiler, Constraint("structural_tag", json.loads(tag))))
        assert accepts(call % "x") and not accepts(call % "<") and _accepts(compiler.compile_structural_tag(tag))(call % "<")
    for name, fmt_spec in tool_formats().items():  # every XML style: no bounded value of any character left
        if fmt_spec.arguments_style in ("json", "pythonic", "gemma4") or name == "minimax_m3":
            continue
        spec = json.dumps({"type": "structural_tag", "format": tool_call_format(fmt_spec, [("f", bounded)],
                                                                              mode="auto", parallel=True)})
        fixed = fixed_ebnf("structural_tag", spec) or ""
        assert "(([^<]))" in fixed and "[\\0-\\U0010ffff]))\n" not in fixed, name


# --- compact any-values (mlc-ai/xgrammar#945) ---------------------------------------------------

# A value that may be any JSON, in each place XGrammar writes its any-value grammar
ANY_VALUES = [{"type": "object", "properties": {"a": {}}, "required": ["a"], "additionalProperties": False},
              {"type": "object", "properties": {"a": {"type": "array"}}, "required": ["a"], "additionalProperties": False},
              {"type": "object", "properties": {"a": {"type": "object"}}, "required": ["a"], "additionalProperties": False},
              {"type": "object", "properties": {"a": {"title": "no type: any value"}}, "required": ["a"],
               "additionalProperties": False}]
ANY_TEXTS = ['{"a":[1,2,3]}', '{"a":{"x":1,"y":[true,null]}}', '{"a":{"x":{"y":"z","w":[[1],[2,3]]}}}', '{"a":{}}',
             '{"a":[]}', '{"a":"s"}', '{"a":[1, 2]}', '{"a":{"x":1, "y":2}}', '{"a":{"x": 1}}', '{"a":[1 ,2]}']


@pytest.mark.parametrize("schema", ANY_VALUES, ids=range(len(ANY_VALUES)))
def test_a_compact_any_value_is_written_compact(compiler, schema) -> None:
    """Whitespace off (the engine's setting): every compact text of a valid document is in the
    grammar, and no text with a blank after a separator is (as in the schema's typed parts)."""
    accepts = _accepts(compile_constraint(compiler, Constraint("json", schema), disable_any_whitespace=True))
    for text in ANY_TEXTS:
        compact = json.dumps(json.loads(text), separators=(",", ":")) == text
        assert accepts(text) == (compact and jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))), text


def test_json_object_mode_is_written_compact(compiler) -> None:
    accepts = _accepts(compile_constraint(compiler, Constraint("json_object", None), disable_any_whitespace=True))
    assert accepts('{"x":1,"y":[1,2,{"z":null,"w":"v"}]}') and not accepts('{"x":1, "y":2}')
    loose = _accepts(compile_constraint(compiler, Constraint("json_object", None)))  # whitespace on: as before
    assert loose('{"x":1,"y":2}') and loose('{ "x" : 1 ,\n "y": [1, 2] }')


def test_xgrammars_own_any_value_was_not_compact(compiler) -> None:
    """The defect fixed (mlc-ai/xgrammar#945, fixed upstream after 0.2.8): if this fails, the
    installed XGrammar writes the separators asked for and :func:`fix_any_separators` can go."""
    own = _accepts(compiler.compile_json_schema('{"type": "object"}', any_whitespace=False, separators=(",", ":")))
    assert own('{"x":1, "y":2}') and not own('{"x":1,"y":2}')


def test_only_the_any_value_separators_change() -> None:
    text = json.dumps(ANY_VALUES[0])
    own = str(xgr.Grammar.from_json_schema(text, any_whitespace=False, separators=(",", ":"))).splitlines()
    fixed = (fixed_ebnf("json", text, any_whitespace=False, separators=(",", ":")) or "").splitlines()
    changed = {a.split(" ::= ")[0] for a, b in zip(own, fixed, strict=True) if a != b}
    assert changed == {"basic_array_items", "basic_object_properties"}
    assert fix_any_separators("\n".join(fixed), ",") == "\n".join(fixed)
    assert fixed_ebnf("json", text) is None  # whitespace on: XGrammar's own grammar, untouched


def test_the_engines_backend_writes_json_object_compact(backend) -> None:
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    backend.disable_any_whitespace = True  # (the engine's setting)
    for kind, spec in [(StructuredOutputOptions.JSON_OBJECT, ""),
                       (StructuredOutputOptions.JSON, json.dumps(ANY_VALUES[1]))]:
        grammar = backend.compile_grammar(kind, spec)
        head = '{"x":1' if kind == StructuredOutputOptions.JSON_OBJECT else '{"a":[1'
        assert grammar.matcher.accept_string(head)
        assert not grammar.matcher.accept_string(", "), kind
        assert grammar.matcher.accept_string(',"y":2}' if kind == StructuredOutputOptions.JSON_OBJECT else ",2]}"), kind
