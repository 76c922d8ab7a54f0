"""Runs one family's parser cases (``tests/data/parsers/<family>.json``: the request's
``tools`` and ``cases`` with ``model_output`` and ``expect``) non-streamed and under every
chunking of ``parser_contract.chunkings``, with the parser bound to the tools' schemas as the
server binds it. Shared by the per-family test modules."""
from __future__ import annotations

import json
from typing import Any

from reasoning_parsers import get_reasoning_parser
from tests.unit._front import CHAT, events, stream_raw
from tests.unit.parser_contract import TESTDATA, check_agree, chunkings, run_nonstream, run_stream, same_text
from tool_parsers import get_tool_parser
from server.messages.message_stream import FinalMessage, MessageStream
from server.messages.openai_message import finish_reason
from server.messages.replay import tool_schemas

__all__ = ["load_family", "family_data", "check_case", "call_view", "grammar_accepts", "family_app", "pieces", "stream_calls",
           "reply_calls",
           "answer_and_prompt", "reply_message", "structural_tag_accepts", "weather_history", "TEMPLATES"]


def load_family(name: str) -> dict[str, Any]:
    """The case file of family ``name``."""
    return json.loads((TESTDATA / "parsers" / f"{name}.json").read_text(encoding="utf-8"))


def family_data(name: str) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """Family ``name``'s case file, its model outputs by case id and its expectations by case id."""
    data = load_family(name)
    return (data, {c["id"]: c["model_output"] for c in data["cases"]}, {c["id"]: c["expect"] for c in data["cases"]})


def call_view(final: FinalMessage) -> list[dict[str, Any]]:
    """The message's calls as a case file writes them: ``arguments`` as JSON, except a call kept
    as far as it was written (``final.unfinished``): ``arguments_text``, the text, and ``unfinished``."""
    out: list[dict[str, Any]] = []
    for i, c in enumerate(final.tool_calls):
        if i in final.unfinished:
            out.append({"name": c.name, "arguments_text": c.arguments, "unfinished": True})
        else:
            out.append({"name": c.name, "arguments": json.loads(c.arguments)})
    return out


def _expect(final: FinalMessage, expect: dict[str, Any], where: str) -> None:
    keys = ("name", "arguments", "arguments_text", "unfinished")  # (a case may note more about a call)
    want = [{k: c[k] for k in keys if k in c} for c in expect["tool_calls"]]
    assert call_view(final) == want, (where, call_view(final))
    if "finish_reason" in expect:  # the engine not having cut the output (length: always "length")
        assert finish_reason(final) == expect["finish_reason"], where
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

    parser_of = get_tool_parser(parser)

    def make(**kw: Any) -> MessageStream:
        return MessageStream(tool_parser=parser_of, tool_names=tuple(schemas), tool_schemas=schemas,
                             reasoning_parser=get_reasoning_parser(reasoning, tool_start=(parser_of.format.trigger,))
                             if reasoning else None, **kw)

    text = case["model_output"]
    whole = run_nonstream(make, text)
    _expect(whole, case["expect"], "non-streamed")
    for how, chunks in chunkings(text).items():
        streamed = run_stream(make, chunks, markers=markers)  # the delta rules hold in every case
        _expect(streamed, case["expect"], how)
        check_agree(streamed, whole)  # content, reasoning, calls and finish_reason


def grammar_accepts(parser: str, tools: list[dict[str, Any]], text: str, *, tool_choice: Any = "auto",
                    parallel: bool = True) -> bool:
    """Whether the tool-call grammar the server builds for ``parser`` lets a model write exactly
    ``text`` and end there (XGrammar's matcher over characters; no tokenizer needed)."""
    from server.structured.constraints import constraint_from_request
    from server.structured.tools import tool_spec_of

    constraint = constraint_from_request(response_format=None, structured_outputs=None,
                                         tools=tool_spec_of(tools, tool_choice, parallel=parallel), tool_format=parser)
    assert constraint is not None and constraint.kind == "structural_tag"
    return structural_tag_accepts(constraint, text)


_COMPILED: dict[str, Any] = {}


TEMPLATES = TESTDATA / "templates"  # vendored chat templates of families that ship none as a built-in


def family_app(make_app: Any, model_dir: Any, *, template: str, parser: str, reasoning: str | None = None) -> Any:
    """``build(pieces)``: an app serving ``parser`` with chat template ``template`` (a built-in name or
    a file) over the scripted engine, SmolLM2's tokenizer standing in for the family's own."""
    from server.chat.render import ChatRenderer
    from tool_parsers import get_family

    renderer = ChatRenderer.from_model(model_dir_or_tokenizer=str(model_dir),
                                       chat_template=template).for_family(get_family(parser))

    def build(script: list[str]) -> Any:
        built = make_app(script=lambda req: list(script), tool_parser=parser, reasoning_parser=reasoning)
        built.state.renderer = renderer
        return built

    return build


def pieces(text: str, size: int = 5) -> list[str]:
    """The text as the engine's chunks."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_calls(raw: str) -> tuple[str, list[tuple[str, Any]]]:
    """Content and (name, arguments) calls rebuilt from an SSE chat stream."""
    content, calls = "", {}
    for event in events(raw):
        if event == "[DONE]" or not event["choices"]:
            continue
        delta = event["choices"][0]["delta"]
        content += delta.get("content") or ""
        for tc in delta.get("tool_calls") or ():
            entry = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
            entry["name"] += tc["function"].get("name") or ""
            entry["arguments"] += tc["function"].get("arguments") or ""
    return content, [(c["name"], json.loads(c["arguments"])) for c in calls.values()]


def reply_calls(client: Any, body: dict[str, Any], *, stream: bool) -> tuple[str, list[tuple[str, Any]]]:
    """Content and calls of one chat request, streamed or not."""
    if stream:
        return stream_calls(stream_raw(client, **body))
    r = client.post(CHAT, json=body)
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"] or ()]
    return msg["content"] or "", calls


def answer_and_prompt(built: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> tuple[str, str]:
    """A multi-turn chat's answer content and the prompt the engine got for it (the history as the
    family's template rendered it)."""
    r = built.client().post(CHAT, json={"messages": messages, "tools": tools})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"], built.engine.tokenizer.decode(
        built.engine.requests[-1].prompt_token_ids)


def reply_message(client: Any, body: dict[str, Any], *, stream: bool) -> tuple[str, str, list[tuple[str, Any]]]:
    """(reasoning, content, calls) of one chat request, streamed or not."""
    if not stream:
        r = client.post(CHAT, json=body)
        assert r.status_code == 200, r.text
        msg = r.json()["choices"][0]["message"]
        calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"] or ()]
        return msg.get("reasoning_content") or "", msg["content"] or "", calls
    reasoning, content, parts = "", "", {}
    for event in events(stream_raw(client, **body)):
        if event == "[DONE]" or not event["choices"]:
            continue
        delta = event["choices"][0]["delta"]
        reasoning += delta.get("reasoning_content") or ""
        content += delta.get("content") or ""
        for tc in delta.get("tool_calls") or ():
            entry = parts.setdefault(tc["index"], {"name": "", "arguments": ""})
            entry["name"] += tc["function"].get("name") or ""
            entry["arguments"] += tc["function"].get("arguments") or ""
    return reasoning, content, [(p["name"], json.loads(p["arguments"])) for p in parts.values()]


def structural_tag_accepts(constraint: Any, text: str) -> bool:
    """Whether a request's structural tag lets a model write exactly ``text`` (XGrammar, by characters)."""
    import xgrammar as xgr

    key = json.dumps(constraint.value, sort_keys=True)
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = _COMPILED[key] = xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_structural_tag(
            json.dumps(constraint.value))
    matcher = xgr.GrammarMatcher(compiled)
    return matcher.accept_string(text) and matcher.is_completed()


def weather_history(arguments: str = '{"city": "Paris"}') -> list[dict[str, Any]]:
    """A user asks, the assistant called get_weather with ``arguments`` (id call_1), the tool said
    "sunny": the multi-turn history each family's template must render."""
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
