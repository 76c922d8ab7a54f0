"""Arguments the XML-style parsers type by a tool's schema are always JSON: a value whose text reads
(``json.loads`` or ``ast.literal_eval``) as something JSON cannot carry (a set, bytes, a complex
number, NaN or an infinity, a tuple key, a lone surrogate) stays the text the model wrote, never a
``json.dumps`` TypeError or a ``NaN`` in the arguments (``tool_parsers/_xml_args.py``)."""
from __future__ import annotations

import json
from typing import Any

import pytest

from tool_parsers import get_family


def _strict_json(text: str) -> Any:
    """``text`` as JSON proper: NaN / Infinity refused, and it must encode as UTF-8."""
    text.encode("utf-8")

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is no JSON")

    return json.loads(text, parse_constant=refuse)


NOT_JSON = ["[{1,2}]", "{1, 2}", "[b'x']", "b'x'", "[1j]", "1j", "NaN", "-Infinity", "1e999", "[1e999]",
            "{(1, 2): 3}", '"\\ud800"', "['\\ud800']", "[...]", "[[1], {2}]"]
SCHEMAS = [{}, {"type": "array"}, {"type": "object"}, {"type": "number"}, {"type": ["array", "object", "number"]},
           {"anyOf": [{"type": "array"}, {"type": "null"}]}]


@pytest.mark.parametrize("schema", SCHEMAS, ids=json.dumps)
@pytest.mark.parametrize("family", ["qwen3_coder", "glm45", "seed_oss", "longcat", "gemma4"])
@pytest.mark.parametrize("text", NOT_JSON)
def test_a_value_json_cannot_carry_stays_its_text(family: str, text: str, schema: Any) -> None:
    parser = get_family(family).parser
    written = parser.write_call(0, "f", {"a": text, "b": 2})
    bound = parser.with_tools({"f": {"type": "object", "properties": {"a": schema, "b": {"type": "integer"}}}})
    (call,) = bound.parse(written, final=True).tool_calls
    assert _strict_json(call.arguments) == {"a": text, "b": 2}
    for end in range(len(written)):  # and while it streams: never a failure, the arguments only grow
        for part in bound.parse(written[:end], final=False).tool_calls:
            assert call.arguments.startswith(part.arguments)


KIMI = ('<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="a" type="number"<|sep|>'
        "{v}<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>")
GEMMA = "<|tool_call>call:f{{a:{v}}}<tool_call|>"  # a bare value (Gemma's own arrays and objects are typed per item)


@pytest.mark.parametrize("family,written,value", [
    *(("kimi_k3", KIMI, v) for v in ("NaN", "Infinity", "-Infinity", "[NaN]", "{1, 2}")),
    *(("gemma4", GEMMA, v) for v in ("NaN", "Infinity", "-Infinity")),
])
@pytest.mark.parametrize("schema", [None, {}, {"type": "number"}])
def test_json_the_model_wrote_with_nan_stays_its_text(family: str, written: str, schema: Any, value: str) -> None:
    """``json.loads`` reads ``NaN`` and ``Infinity``; the arguments must not carry them."""
    parser = get_family(family).parser.with_tools({"f": {"properties": {"a": schema}} if schema is not None else {}})
    (call,) = parser.parse(written.format(v=value), final=True).tool_calls
    assert _strict_json(call.arguments) == {"a": value}
