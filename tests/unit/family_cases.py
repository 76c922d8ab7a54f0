"""Runs one family's parser cases (``tests/data/parsers/<family>.json``: the request's
``tools`` and ``cases`` with ``model_output`` and ``expect``) non-streamed and under every
chunking of ``parser_contract.chunkings``, with the parser bound to the tools' schemas as the
server binds it. Shared by the per-family test modules."""
from __future__ import annotations

import json
from typing import Any

from reasoning_parsers import get_reasoning_parser
from tests.unit.parser_contract import TESTDATA, check_agree, chunkings, run_nonstream, run_stream, same_text
from tool_parsers import get_tool_parser
from tool_parsers.message_stream import FinalMessage, MessageStream
from tool_parsers.replay import tool_schemas

__all__ = ["load_family", "check_case", "grammar_accepts"]


def load_family(name: str) -> dict[str, Any]:
    """The case file of family ``name``."""
    return json.loads((TESTDATA / "parsers" / f"{name}.json").read_text(encoding="utf-8"))


def _expect(final: FinalMessage, expect: dict[str, Any], where: str) -> None:
    got = [(c.name, json.loads(c.arguments)) for c in final.tool_calls]
    want = [(c["name"], c["arguments"]) for c in expect["tool_calls"]]
    assert got == want, where
    if "content" in expect:
        assert same_text(final.content, expect["content"]), (where, final.content, expect["content"])
    if "reasoning" in expect:
        assert same_text(final.reasoning, expect["reasoning"]), (where, final.reasoning, expect["reasoning"])


def check_case(parser: str, data: dict[str, Any], case: dict[str, Any], *, reasoning: str | None = None,
               markers: tuple[str, ...] = ()) -> None:
    """The case's calls, content (and reasoning) come out non-streamed and streamed alike, whatever
    the chunking; every stream follows the OpenAI delta rules (``parser_contract.Reconstructor``)."""
    schemas = tool_schemas(data["tools"])
    assert schemas is not None

    def make(**kw: Any) -> MessageStream:
        return MessageStream(tool_parser=get_tool_parser(parser), tool_names=tuple(schemas), tool_schemas=schemas,
                             reasoning_parser=get_reasoning_parser(reasoning) if reasoning else None, **kw)

    text = case["model_output"]
    whole = run_nonstream(make, text)
    _expect(whole, case["expect"], "non-streamed")
    for how, chunks in chunkings(text).items():
        streamed = run_stream(make, chunks, markers=markers)  # the delta rules hold in every case
        if not case.get("stream_differs"):  # (a call cut after it was partly sent stays as sent)
            _expect(streamed, case["expect"], how)
            check_agree(streamed, whole)


def grammar_accepts(parser: str, tools: list[dict[str, Any]], text: str, *, tool_choice: Any = "auto",
                    parallel: bool = True) -> bool:
    """Whether the tool-call grammar the server builds for ``parser`` lets a model write exactly
    ``text`` and end there (XGrammar's matcher over characters; no tokenizer needed)."""
    import xgrammar as xgr

    from server.structured.constraints import constraint_from_request

    constraint = constraint_from_request(response_format=None, structured_outputs=None, tools=tools,
                                         tool_choice=tool_choice, parallel_tool_calls=parallel, tool_format=parser)
    assert constraint is not None and constraint.kind == "structural_tag"
    key = json.dumps(constraint.value, sort_keys=True)
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = _COMPILED[key] = xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_structural_tag(
            json.dumps(constraint.value))
    matcher = xgr.GrammarMatcher(compiled)
    return matcher.accept_string(text) and matcher.is_completed()


_COMPILED: dict[str, Any] = {}
