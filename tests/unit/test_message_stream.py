"""server/messages/message_stream.py: the OpenAI delta rules (compute_deltas) and MessageStream."""
from __future__ import annotations

import json
import random

import pytest

from reasoning_parsers import get_reasoning_parser
from server.messages import message_stream
from server.messages.message_stream import (
    FinalMessage,
    MessageDelta,
    MessageStream,
    Parsed,
    StreamRetractionError,
    ToolCallDelta,
    compute_deltas,
    new_tool_call_id,
)
from tests.unit.parser_contract import check_agree, chunkings, run_nonstream, run_stream
from tool_parsers import TOOL_PARSERS, get_tool_parser
from tool_parsers.base import ToolCallPart
from server.messages.openai_message import finish_reason

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def _p(reasoning: str = "", content: str = "", *calls: tuple[str | None, str]) -> Parsed:
    parts = tuple(ToolCallPart(n, a, False) for n, a in calls)
    return Parsed(reasoning, content, parts, tuple(f"call_{i:024d}" for i in range(len(parts))))


def test_compute_deltas_text_grows() -> None:
    assert compute_deltas(_p(), _p()) is None
    assert compute_deltas(_p("a", ""), _p("ab", "c")) == MessageDelta("b", "c", ())
    with pytest.raises(StreamRetractionError, match="content"):
        compute_deltas(_p("", "abc"), _p("", "abd"))
    with pytest.raises(StreamRetractionError, match="reasoning"):
        compute_deltas(_p("abc"), _p("ab"))


def test_compute_deltas_tool_calls() -> None:
    id0, id1 = "call_" + "0" * 24, "call_" + "0" * 23 + "1"
    delta = compute_deltas(_p(), _p("", "", ("f", '{"a"')))
    assert delta == MessageDelta(None, None, (ToolCallDelta(0, id0, "f", ""), ToolCallDelta(0, None, None, '{"a"')))
    delta = compute_deltas(_p("", "", ("f", '{"a"')), _p("", "", ("f", '{"a": 1}'), ("g", "")))
    assert delta is not None and delta.tool_calls == (
        ToolCallDelta(0, None, None, ": 1}"),
        ToolCallDelta(1, id1, "g", ""),
    )
    # a call whose name is not known yet is not streamed
    assert compute_deltas(_p(), _p("", "", (None, '{"a"'))) is None
    with pytest.raises(StreamRetractionError, match="disappeared"):
        compute_deltas(_p("", "", ("f", "{")), _p())
    with pytest.raises(StreamRetractionError, match="changed"):
        compute_deltas(_p("", "", ("f", "{")), _p("", "", ("g", "{")))
    with pytest.raises(StreamRetractionError, match="arguments"):
        compute_deltas(_p("", "", ("f", '{"a"')), _p("", "", ("f", '{"b"')))


def test_new_tool_call_id_shape() -> None:
    ids = {new_tool_call_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(i.startswith("call_") and len(i) == 29 and i[5:].isalnum() and i.isascii() for i in ids)


def test_new_tool_call_id_is_uniform_over_the_alphabet() -> None:
    from collections import Counter

    counts = Counter("".join(new_tool_call_id()[5:] for _ in range(5000)))  # 120,000 characters
    assert len(counts) == 62  # every letter and digit; ~1,935 each
    assert max(counts.values()) / min(counts.values()) < 1.3  # a modulo bias would make 8 of them 1.5x


def test_new_tool_call_id_draws_again_when_too_many_bytes_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    import server.messages.deltas as deltas

    reads = iter([bytes([255] * 10 + [0] * 22), bytes(range(32))])  # 22 kept, then 32 kept
    monkeypatch.setattr(deltas.os, "urandom", lambda n: next(reads))
    assert new_tool_call_id() == "call_" + "abcdefghijklmnopqrstuvwx"


def _qwen_hermes(**kw: object) -> MessageStream:
    return MessageStream(
        tool_parser=get_tool_parser("hermes"), reasoning_parser=get_reasoning_parser("qwen3", tool_start=("<tool_call>",)),
        **kw  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    "text,reasoning,content",
    [
        (f"<think>I should look it up.</think>\n\n{CALL}", "I should look it up.", ""),
        (f"<think>No end tag, straight to the call.\n{CALL}", "No end tag, straight to the call.\n", ""),
        (f"Opened by the template.</think>Checking.\n{CALL}", "Opened by the template.", "Checking.\n"),
    ],
)
def test_think_then_tool_call(text: str, reasoning: str, content: str) -> None:
    whole = run_nonstream(_qwen_hermes, text)
    assert whole.reasoning == reasoning and (whole.content or "") == content
    assert [(c.name, json.loads(c.arguments)) for c in whole.tool_calls] == [("get_weather", {"city": "Paris"})]
    for chunks in chunkings(text).values():
        check_agree(run_stream(_qwen_hermes, chunks, markers=("<think>", "</think>", "<tool_call>")), whole)


def test_tool_markers_inside_reasoning_are_not_parsed_by_deepseek() -> None:
    def make(**kw: object) -> MessageStream:
        return MessageStream(tool_parser=get_tool_parser("hermes"),
                             reasoning_parser=get_reasoning_parser("deepseek_r1"), **kw)  # type: ignore[arg-type]

    text = f"maybe {CALL}?</think>{CALL}"
    final = run_nonstream(make, text)
    assert final.reasoning == f"maybe {CALL}?"
    assert [c.name for c in final.tool_calls] == ["get_weather"] and final.content is None


def test_non_streamed_keeps_an_unfinished_call_as_a_stream_sends_it() -> None:
    """The rule for an unfinished call: the output ends inside it, so it is kept as written (its
    name and argument text), non-streamed as streamed, and the answer ends with "stop"."""
    stream = MessageStream(tool_parser=get_tool_parser("hermes"), reasoning_parser=None, streaming=False)
    assert stream.feed('<tool_call>\n{"name": "f", "arguments": {"a": 1}') is None
    stream.finish()
    final = stream.final_message()
    assert [(c.name, c.arguments) for c in final.tool_calls] == [("f", '{"a": 1}')] and final.content is None
    assert final.unfinished == [0] and len(final.errors) == 1
    assert finish_reason(final) == "stop" and finish_reason(final, length=True) == "length"


def test_call_cut_before_its_arguments_never_reaches_the_client() -> None:
    """A call cut right after its name is not a call, streamed or not (never f({}))."""
    def make(**kw: object) -> MessageStream:
        return MessageStream(tool_parser=get_tool_parser("hermes"), reasoning_parser=None, **kw)  # type: ignore[arg-type]

    text = '<tool_call>\n{"name": "delete_all", "'
    streamed = run_stream(make, list(text))
    whole = run_nonstream(make, text)
    assert streamed.tool_calls == [] and whole.tool_calls == []
    assert streamed.content == whole.content and "delete_all" in (whole.content or "")


def test_stream_lifecycle_errors_and_id_factory() -> None:
    ids = iter(["call_" + "a" * 24, "call_" + "b" * 24])
    stream = MessageStream(tool_parser=get_tool_parser("hermes"), reasoning_parser=None, id_factory=lambda: next(ids))
    stream.feed(CALL + CALL)
    assert stream.finish() is None
    assert [c.id for c in stream.final_message().tool_calls] == ["call_" + "a" * 24, "call_" + "b" * 24]
    with pytest.raises(RuntimeError):
        stream.feed("x")
    with pytest.raises(RuntimeError):
        stream.finish()


def test_plain_text_without_parsers() -> None:
    def make(**kw: object) -> MessageStream:
        return MessageStream(tool_parser=None, reasoning_parser=None, **kw)  # type: ignore[arg-type]

    text = "Hello <tool_call> world\n"
    for chunks in chunkings(text).values():
        final = run_stream(make, chunks)
        assert final.content == text and final.reasoning is None and final.tool_calls == []


# Random outputs built from the pieces parsers care about: every chunking must follow the
# delta rules, add up to the final message, and (unless a streamed call broke) agree with
# the non-streamed parse. Fixed seed: reproducible, fast.
_PIECES = [
    "Hi ", "\n", " ", "é东", "<think>", "</think>", "<tool_call>", "</tool_call>", "<|python_tag|>",
    "[TOOL_CALLS]", "[ARGS]", '{"name": "f", "arguments": {"a": "}"}}', '{"name": "g"}', '{"name": "h", ',
    '"parameters": {}}', "[", "]", "{", "}", ", ", ";", '"', "get_weather", '{"x": [1, 2]}', "oops",
    '[{"name": "f", "arguments": {"b": [true]}}]', 'f{"a": 1}', "get_weather[ARGS]{}", '{"name": "get_weather", ',
    '"parameters": {"city": "Zürich"}}', "</",
    # Harmony (gpt_oss): messages, channels and a call's header
    "<|channel|>analysis<|message|>", "<|end|><|start|>assistant", "<|channel|>final<|message|>",
    "<|channel|>commentary to=functions.f <|constrain|>json<|message|>", "<|call|>",
]


@pytest.mark.parametrize("settle_after", [1, None], ids=["checkpoint-every-step", "default"])
@pytest.mark.parametrize("parser", TOOL_PARSERS)
def test_random_outputs_follow_the_rules(parser: str, settle_after: int | None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    if settle_after is not None:  # these texts are short: make the stream settle at every checkpoint
        monkeypatch.setattr(message_stream, "_SETTLE_AFTER", settle_after)
    rng = random.Random(f"gramserve-{parser}")
    for i in range(90):
        trigger = (get_tool_parser(parser).format.trigger,)  # as resolve_parsers gives it
        reasoning = (None, get_reasoning_parser("qwen3", tool_start=trigger),
                     get_reasoning_parser("deepseek_r1", thinking=False, tool_start=trigger))[i % 3]

        def make(**kw: object) -> MessageStream:
            return MessageStream(tool_parser=get_tool_parser(parser), reasoning_parser=reasoning,
                                 tool_names=["f", "g", "get_weather"], **kw)  # type: ignore[arg-type]

        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 10)))
        whole = run_nonstream(make, text)
        for name, chunks in chunkings(text).items():
            final = run_stream(make, chunks)
            assert not any("stopped streaming" in e for e in final.errors), final.errors
            check_agree(final, whole)  # a broken call too: kept as far as it was written, in both


# A malformed call, then a valid one (issue 11): streamed, the later call and text reach the
# client whatever the chunking, as they do non-streamed. The malformed call is kept as far as it
# was written well (its name and arguments up to the break), streamed or not, whatever the chunking.
MALFORMED_THEN_VALID = {
    "hermes_second_object_in_block": ('<tool_call>\n{"name": "h", "arguments": {}}\n{"name": "f", "arguments": '
                                      '{"a": 1,,}}\n</tool_call>\nok <tool_call>{"name": "g", "arguments": {"b": "x"}}'
                                      '</tool_call>'),
    "hermes": ('<tool_call>\n{"name": "f", "arguments": {"a": 1,,}}\n</tool_call>\nThen '
               '<tool_call>\n{"name": "g", "arguments": {"b": "x"}}\n</tool_call>\nDone.'),
    "llama3_json": ('<|python_tag|>{"name": "f", "parameters": {"a": 1,,}}<|python_tag|>'
                    '{"name": "g", "parameters": {"b": "x"}}'),
    "mistral": ('[TOOL_CALLS] [{"name": "f", "arguments": {"a": 1,,}}]Then [TOOL_CALLS] '
                '[{"name": "g", "arguments": {"b": "x"}}]Done.'),
}


def _splits(text: str) -> list[list[str]]:
    """Every split into two chunks, per character, and random chunkings (fixed seeds)."""
    out = [[text[:i], text[i:]] for i in range(1, len(text))] + [list(text), [text]]
    for seed in range(20):
        rng = random.Random(seed)
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(2, 12)))
        out.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])])
    return out


@pytest.mark.parametrize("settle_after", [1, None], ids=["checkpoint-every-step", "default"])
@pytest.mark.parametrize("case", sorted(MALFORMED_THEN_VALID))
def test_calls_after_a_malformed_call_reach_streaming_clients(case: str, settle_after: int | None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    if settle_after is not None:
        monkeypatch.setattr(message_stream, "_SETTLE_AFTER", settle_after)
    parser = case.split("_second")[0]

    def make(**kw: object) -> MessageStream:
        return MessageStream(tool_parser=get_tool_parser(parser), reasoning_parser=None, tool_names=["f", "g", "h"],
                             guard_repeats=True, **kw)  # type: ignore[arg-type]

    text = MALFORMED_THEN_VALID[case]
    whole = run_nonstream(make, text)
    assert (whole.tool_calls[-1].name, json.loads(whole.tool_calls[-1].arguments)) == ("g", {"b": "x"})
    broken = [(i, c.arguments) for i, c in enumerate(whole.tool_calls) if c.name == "f"]
    assert [(i, args) for i, args in broken] == [(whole.unfinished[0], '{"a": 1,')]  # up to the break
    assert '"a": 1,,' not in (whole.content or "")
    assert finish_reason(whole) == "stop"
    for chunks in _splits(text):
        streamed = run_stream(make, chunks)  # deltas add up to the final message
        assert not any("stopped streaming" in e for e in streamed.errors)
        assert len(streamed.errors) == len(whole.errors) == 1, streamed.errors  # one malformed call, one error
        check_agree(streamed, whole)


def test_long_outputs_settle_and_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the settle threshold (real lengths), token-sized chunks give the non-streamed answer."""
    long_text = "word " * 300
    text = (f"<think>{long_text}</think>{long_text}<tool_call>\n"
            f'{{"name": "f", "arguments": {{"s": "{long_text}"}}}}\n</tool_call>\n{long_text}')

    def make(**kw: object) -> MessageStream:
        return MessageStream(tool_parser=get_tool_parser("hermes"), reasoning_parser=get_reasoning_parser("qwen3"),
                             tool_names=["f"], **kw)  # type: ignore[arg-type]

    whole = run_nonstream(make, text)
    assert whole.reasoning == long_text and [c.name for c in whole.tool_calls] == ["f"]
    for seed in (1, 2):
        rng = random.Random(seed)
        chunks, i = [], 0
        while i < len(text):
            k = rng.randint(1, 6)
            chunks.append(text[i : i + k])
            i += k
        check_agree(run_stream(make, chunks, markers=("<think>", "</think>", "<tool_call>")), whole)


# The fast path for text inside an open call's arguments (MessageStream._extend_arguments), here inside strings,
# must give exactly the deltas the parsing path gives, feed by feed.
_STRING_CALLS = {
    "hermes": ('Sure. <tool_call>\n{"name": "f", "arguments": {"note": "{s1}", "tags": ["{s2}", "b c"], '
               '"deep": {"k": "{s3}"}}}\n</tool_call>\n<tool_call>\n{"name": "g", "arguments": {"q": "{s1}"}}'
               '\n</tool_call>'),
    "llama3_json": '<|python_tag|>{"name": "f", "parameters": {"note": "{s1}", "tags": ["{s2}"], "k": "{s3}"}}',
    "mistral": ('[TOOL_CALLS] [{"name": "f", "arguments": {"note": "{s1}", "tags": ["{s2}"]}}, '
                '{"name": "g", "arguments": {"q": "{s3}"}}]'),
}
_STRING_VALUES = [
    "plain words, and numbers 12.5 - ok!", 'quote \\" inside', "back\\\\slash", "tab\\t and \\u00e9",
    "brackets [x] {y} <z> </tool_call> ; |", "é东 mixed", "Zürich straße 東京 Ελλάδα", "", "ends with a backslash \\\\",
]


def _deltas(parser: str, chunks: list[str], *, guard: bool) -> list[MessageDelta | None]:
    ids = iter(f"call_{i}" for i in range(100))
    stream = MessageStream(tool_parser=get_tool_parser(parser), reasoning_parser=None, tool_names=["f", "g"],
                           id_factory=lambda: next(ids), guard_repeats=guard)
    return [stream.feed(c) for c in chunks] + [stream.finish()]


@pytest.mark.parametrize("parser", sorted(_STRING_CALLS))
def test_text_inside_an_argument_string_streams_as_the_parser_would(parser: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(f"strings-{parser}")
    fast_steps = 0
    for i in range(60):
        values = [rng.choice(_STRING_VALUES) for _ in range(3)]
        text = _STRING_CALLS[parser]
        for k, v in enumerate(values, 1):
            text = text.replace("{s%d}" % k, v)
        if i % 4 == 3:
            text = text[: rng.randint(1, len(text))]  # cut anywhere: inside a string, a key, a marker
        fast = _fast_agrees_with_parsing(parser, text, rng, monkeypatch, max_chunk=7)
        fast_steps += sum(1 for d in fast if d and d.tool_calls and d.tool_calls[0].id is None and not d.content)
    assert fast_steps > 100  # argument fragments were streamed (the fast path had work to do)


def _fast_agrees_with_parsing(parser: str, text: str, rng: random.Random, monkeypatch: pytest.MonkeyPatch, *,
                              max_chunk: int) -> list[MessageDelta | None]:
    """``text`` fed in random chunks with and without the fast path (repeat guard off and on):
    the same deltas, feed by feed. Returns the fast path's deltas (guard on)."""
    chunks, at = [], 0
    while at < len(text):
        n = rng.randint(1, max_chunk)
        chunks.append(text[at : at + n])
        at += n
    for guard in (False, True):
        monkeypatch.setattr(message_stream, "FAST_ARGUMENTS", False)
        slow = _deltas(parser, chunks, guard=guard)
        monkeypatch.setattr(message_stream, "FAST_ARGUMENTS", True)
        fast = _deltas(parser, chunks, guard=guard)
        assert fast == slow, (text, chunks)
    return fast


# Arguments of every JSON shape (numbers, literals, nesting, whitespace), continuations that break
# the JSON, arguments that are not an object, and a call repeated (the guard): any text inside an
# open arguments value must stream as the parsing path streams it, feed by feed.
_JSON_ARGS = ['{"n": 12, "x": -3.5e2, "ok": true, "no": null}', '{"a": [1, [2, {"b": false}], []], "c": {}}',
              '{ "s" : "v" ,\n "t": [ "u" , 10 ] }', '{"a": 1,,}', '{"a": 1 2}', '{"a": tru}', '{"a" 1}',
              '[1, 2]', '{"q": "x"}}', '{"k": "a}b]c"}', '{"deep": [[[[{"z": 0.5}]]]]}', '{}']
_JSON_CALLS = {
    "hermes": ('Hi <tool_call>\n{"name": "f", "arguments": {a1}}\n</tool_call>\n'
               '<tool_call>\n{"name": "g", "arguments": {a2}}\n</tool_call>'),
    "llama3_json": '<|python_tag|>{"name": "f", "parameters": {a1}}; {"name": "g", "parameters": {a2}}',
    "mistral": '[TOOL_CALLS] [{"name": "f", "arguments": {a1}}, {"name": "g", "arguments": {a2}}]',
}


@pytest.mark.parametrize("parser", sorted(_JSON_CALLS))
def test_text_inside_any_arguments_value_streams_as_the_parser_would(parser: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(f"json-{parser}")
    for i in range(80):
        a1 = rng.choice(_JSON_ARGS)
        a2 = a1 if i % 5 == 0 else rng.choice(_JSON_ARGS)  # the same arguments twice: the repeat guard
        text = _JSON_CALLS[parser].replace("{a1}", a1).replace("{a2}", a2)
        if i % 2 == 0:
            text = text.replace('"g"', '"f"')  # the same function twice
        if i % 4 == 3:
            text = text[: rng.randint(1, len(text))]
        _fast_agrees_with_parsing(parser, text, rng, monkeypatch, max_chunk=6)


@pytest.mark.parametrize(("opening", "tokens", "closing", "expected"), [
    ('{"text": "a', ["b", " c", "d e", ".", "!"], '"}', {"text": "ab cd e.!"}),
    ("{", ['"n', '":', " 1", "2", ",", ' "xs', '": [', "true", ", {", '"b": null', "}]"], "}",
     {"n": 12, "xs": [True, {"b": None}]}),
], ids=["inside-a-string", "numbers-and-structure"])
def test_text_that_leaves_the_arguments_open_skips_the_parse(opening: str, tokens: list[str], closing: str,
                                                             expected: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any token after which the open call's arguments value is still open (string text, numbers,
    literals, nesting) does not call the tool parser; the token that ends the value does."""
    parser = get_tool_parser("hermes")
    calls = []
    real = type(parser).parse

    def counting(self, text, **kw):  # type: ignore[no-untyped-def]
        calls.append(len(text))
        return real(self, text, **kw)

    monkeypatch.setattr(type(parser), "parse", counting)
    stream = MessageStream(tool_parser=parser, reasoning_parser=None, tool_names=["f"])
    stream.feed('<tool_call>\n{"name": "f", "arguments": ' + opening)
    before = len(calls)
    deltas = [stream.feed(t) for t in tokens]
    assert len(calls) == before  # no parse for these tokens
    assert [d.tool_calls[0].arguments for d in deltas] == tokens
    stream.feed(closing)
    assert len(calls) == before + 1  # the value ends here: parsed
    stream.feed("}\n</tool_call>")
    stream.finish()
    final = stream.final_message()
    assert [(c.name, json.loads(c.arguments)) for c in final.tool_calls] == [("f", expected)]


def _first_call_deltas(chunks: list[str], *, early: bool) -> tuple[FinalMessage, list[tuple[int, ToolCallDelta]]]:
    ids = iter(f"call_{k}" for k in range(100))
    stream = MessageStream(tool_parser=get_tool_parser("hermes"), reasoning_parser=None,
                           tool_names=["get_weather", "f"], id_factory=lambda: next(ids), guard_repeats=True,
                           early_names=early)
    deltas = [stream.feed(c) for c in chunks] + [stream.finish()]
    found = [(k, tc) for k, d in enumerate(deltas) for tc in (d.tool_calls if d else ())]
    return stream.final_message(), found


def test_early_names_send_a_call_once_its_name_is_whole() -> None:
    """``early_names`` (a grammar ends every call it opens): each call's first delta comes with the
    chunk that completes its name, with ``arguments: ""`` (as OpenAI streams), before its arguments
    begin; the message, and the arguments put together, are the same as without."""
    from bench.parse_cost import tokens_of

    text = "Sure. " + get_tool_parser("hermes").write([("get_weather", {"city": "Paris"}), ("f", {"a": 1})])
    for chunks in (tokens_of(text), [text[k:k + 3] for k in range(0, len(text), 3)], list(text)):
        late_final, late = _first_call_deltas(chunks, early=False)
        early_final, early = _first_call_deltas(chunks, early=True)
        assert early_final == late_final and [c.name for c in early_final.tool_calls] == ["get_weather", "f"]
        for index, name in enumerate(["get_weather", "f"]):
            (k_early, head), = [(k, tc) for k, tc in early if tc.index == index and tc.id is not None]
            (k_late, _), = [(k, tc) for k, tc in late if tc.index == index and tc.id is not None]
            assert (head.name, head.arguments) == (name, "") and k_early < k_late
            so_far = "".join(chunks[: k_early + 1])
            assert "{" not in so_far[so_far.rindex(f'"{name}"'):], so_far  # its arguments had not begun
            args = "".join(tc.arguments for _, tc in early if tc.index == index)
            assert args == early_final.tool_calls[index].arguments


def test_early_names_keep_a_call_cut_after_its_name_as_unfinished() -> None:
    """Where the grammar's promise fails (the engine stopped inside the call), the name already sent
    stays: the call is kept unfinished, its arguments "{}", never a finish of "tool_calls"."""
    text = '<tool_call>\n{"name": "get_weather", "argu'
    final, found = _first_call_deltas([text[:35], text[35:]], early=True)
    assert [c.name for c in final.tool_calls] == ["get_weather"] and final.unfinished == [0]
    assert "".join(tc.arguments for _, tc in found) == "{}"
    final, found = _first_call_deltas([text[:35], text[35:]], early=False)
    assert final.tool_calls == [] and found == []


@pytest.mark.parametrize("names, at", [
    (["get_weather"], "<tool_call>"),  # one tool: the start marker names the call
    (["get_weather", "get_time"], '<tool_call>\n{"name": "get_w'),  # the first letter that tells them apart
    (["get_weather", "get_weather_now"], '<tool_call>\n{"name": "get_weather"'),  # a name inside another: its end
])
def test_a_name_the_grammar_leaves_alone_goes_out_before_it_is_whole(names: list[str], at: str) -> None:
    """``grammar_names`` (the grammar writes each call's head for one of them): a call's first delta comes
    with the chunk after which one name alone fits the head written so far; the deltas follow OpenAI's
    rules and the message is the one the parse alone makes, streamed or not."""
    parser = get_tool_parser("hermes")
    text = "Sure. " + parser.write([("get_weather", {"city": "Paris"})])

    def make(**kw: object) -> MessageStream:
        return MessageStream(tool_parser=parser, reasoning_parser=None, tool_names=names, early_names=True,
                             guard_repeats=True, grammar_names=names, **kw)  # type: ignore[arg-type]

    chunks = list(text)
    stream = make()
    for k, c in enumerate(chunks):
        d = stream.feed(c)
        if d is not None and d.tool_calls:
            assert (d.tool_calls[0].name, d.tool_calls[0].arguments) == ("get_weather", "")
            assert "".join(chunks[: k + 1]) == "Sure. " + at
            break
    else:
        raise AssertionError("no call delta")
    whole = run_nonstream(make, text)
    for chunking in chunkings(text).values():
        check_agree(run_stream(make, chunking), whole)  # the delta rules, and the same message
    assert [(c.name, json.loads(c.arguments)) for c in whole.tool_calls] == [("get_weather", {"city": "Paris"})]


def test_a_head_the_grammar_did_not_write_is_named_by_its_parse() -> None:
    """Text no name's head fits (not what the grammar writes: another spacing, another name) is named
    only by the parse, once whole, as without ``grammar_names``."""
    parser = get_tool_parser("hermes")
    for text, name in (('<tool_call>\n{"name":"get_time", "arguments": {}}\n</tool_call>', "get_time"),
                       ('<tool_call>\n{"name": "set_time", "arguments": {}}\n</tool_call>', "set_time")):
        stream = MessageStream(tool_parser=parser, reasoning_parser=None, tool_names=None, early_names=True,
                               grammar_names=["get_weather", "get_time"])
        first, delta = next((k, d) for k, c in enumerate(text) if (d := stream.feed(c)) is not None and d.tool_calls)
        assert text[: first + 1].endswith(f'"{name}"') and delta.tool_calls[0].name == name  # when the name ends


@pytest.mark.parametrize(("text", "calls"), [
    ('Sure. <tool_call>\n{"name": "get_w', ["get_weather"]),  # one name fits: a call, kept unfinished
    ('Sure. <tool_call>\n{"name": "get_', []),  # two still fit: no call (its text is content)
])
def test_a_call_cut_inside_its_name_is_the_same_streamed_or_not(text: str, calls: list[str]) -> None:
    """Should the engine stop inside a name (the grammar's promise broken: an abort), a non-streamed
    answer names the call from its start marker as a stream does, whatever the chunking."""
    names = ["get_weather", "get_time"]

    def make(**kw: object) -> MessageStream:
        return MessageStream(tool_parser=get_tool_parser("hermes"), reasoning_parser=None, tool_names=names,
                             early_names=True, grammar_names=names, **kw)  # type: ignore[arg-type]

    whole = run_nonstream(make, text)
    assert [c.name for c in whole.tool_calls] == calls and whole.unfinished == list(range(len(calls)))
    for chunking in chunkings(text).values():
        check_agree(run_stream(make, chunking), whole)
