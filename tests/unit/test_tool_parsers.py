"""Tool parser contract: every case of testdata/parsers/cases.json for hermes, llama3_json
and mistral, plus our own cases for the known pain points. Each text runs non-streamed
and streamed (per character, random chunks, tokens or small chunks), through
MessageStream and an independent delta reconstructor (see parser_contract.py)."""
from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tests.unit.parser_contract import (check_agree, checkpoint_checks, chunkings, ends_within, load_cases, run_nonstream,
                                        run_stream, same_text)
from tool_parsers import TOOL_PARSERS, detect_tool_parser, get_tool_parser
from tool_parsers.base import CallFormat
from server.messages.message_stream import FinalMessage, MessageStream

# cases.json parser family -> our parser
FAMILY = {
    "hermes": "hermes",
    "sglang_hermes": "hermes",
    "llama3_json": "llama3_json",
    "mistral_pre_v11": "mistral",
    "mistral_v11": "mistral_v11",
    "sglang_mistral": "mistral",
}

# Where we deliberately differ from the upstream expectation, and why.
OVERRIDES: dict[str, tuple[str, dict[str, Any]]] = {
    # vLLM's mistral_common-based parser raises on a second [TOOL_CALLS]; a server must not
    # fail a request for that, so both sections are parsed.
    "mistral_pre_v11/two_bot_tokens": ("parse every marker", {"tool_names": ["add", "sub"]}),
    # SGLang drops an unparsable section; vLLM (and we) give the text back as content so
    # the user sees what the model wrote (the marker itself is removed).
    "sglang_mistral/invalid_array": ("malformed -> content", {"tool_calls": [], "content": "[not valid json]"}),
    # vLLM returns no call non-streamed but streams the call's name and argument prefix. Our rule
    # for an unfinished call (docs/tool_calling.md): kept as far as it was written well, streamed
    # and not alike, with finish_reason "stop" (never "tool_calls").
    "hermes/invalid_json_missing_brace": ("unfinished call kept as written", {
        "raw_calls": [("final_answer", '{"trigger": true}')], "content": "", "unfinished": [0]}),
    "llama3_json/invalid_json": ("broken call kept up to the break", {
        "raw_calls": [("invalidTool", "{")], "content": "", "unfinished": [0]}),
}

CASES = load_cases(tuple(FAMILY))


def _key(case: dict[str, Any]) -> str:
    return f"{case['parser']}/{case['id']}"


def _make(parser: str, tool_names: Any = None):
    def make(**kw: Any) -> MessageStream:
        return MessageStream(tool_parser=get_tool_parser(parser), reasoning_parser=None, tool_names=tool_names, **kw)

    return make


def _markers(parser: str) -> tuple[str, ...]:
    p = get_tool_parser(parser)
    return (p.start, p.end)


def _check_expect(final: FinalMessage, expect: dict[str, Any]) -> None:
    calls = final.tool_calls
    if "tools_called" in expect:
        assert bool(calls) == expect["tools_called"]
    if "tool_calls" in expect:
        assert [c.name for c in calls] == [c["name"] for c in expect["tool_calls"]]
        assert [json.loads(c.arguments) for c in calls] == [c["arguments"] for c in expect["tool_calls"]]
    if "tool_names" in expect:
        assert [c.name for c in calls] == expect["tool_names"]
    if "first_args" in expect:
        assert json.loads(calls[0].arguments) == expect["first_args"]
    if "arguments_exact" in expect:
        assert calls[0].arguments == expect["arguments_exact"]
    if "raw_calls" in expect:  # calls kept as written: their arguments need not be JSON
        assert [(c.name, c.arguments) for c in calls] == expect["raw_calls"]
    assert final.unfinished == expect.get("unfinished", []), final.unfinished
    for key in ("content", "normal_text"):
        if key in expect:
            assert same_text(final.content, expect[key]), (final.content, expect[key])


@pytest.mark.parametrize("case", CASES, ids=_key)
def test_case(case: dict[str, Any]) -> None:
    parser = FAMILY[case["parser"]]
    expect = dict(case["expect"])
    if _key(case) in OVERRIDES:
        expect = OVERRIDES[_key(case)][1]
    assert "raises" not in expect, "every 'raises' case needs a stated override"
    text = case.get("model_output") or "".join(case["model_deltas"])
    make = _make(parser)
    modes = case["modes"]
    whole = run_nonstream(make, text)
    if modes in ("nonstream", "both"):
        _check_expect(whole, expect)
    streamed = [
        run_stream(make, chunks, markers=_markers(parser))
        for chunks in chunkings(text, case.get("model_deltas")).values()
    ]
    if modes in ("stream", "both"):
        _check_expect(streamed[0], expect)
    for final in streamed:
        check_agree(final, whole)


def test_no_silent_skips() -> None:
    """Every cases.json family is either mapped here or owned by the reasoning tests."""
    from tests.unit.parser_contract import TESTDATA

    families = {c["parser"] for c in json.loads((TESTDATA / "parsers" / "cases.json").read_text())["cases"]}
    tool_families = {f for f in families if not f.startswith(("reasoning_", "sglang_reasoning_"))}
    assert tool_families <= set(FAMILY), tool_families - set(FAMILY)
    assert len(CASES) >= 25


def test_every_case_file_runs_streamed_and_whole_with_no_exceptions() -> None:
    """Every parser case in the repo runs non-streamed and under every chunking, asserting the two
    agree on content, reasoning, calls and finish_reason (``parser_contract.check_agree``): cases.json
    here, defects.json in test_tool_parsers_defects.py, and each family's file through
    ``family_cases.check_case`` in its own module. No case may opt out (the rule for an unfinished
    call, docs/tool_calling.md, makes every one agree)."""
    from pathlib import Path

    from tests.unit.parser_contract import TESTDATA

    modules = "".join(f.read_text(encoding="utf-8") for f in Path(__file__).parent.glob("test_*.py"))
    for path in sorted((TESTDATA / "parsers").glob("*.json")):
        cases = json.loads(path.read_text(encoding="utf-8"))["cases"]
        for case in cases:
            assert "stream_differs" not in case and "stream_differs" not in case.get("expect", {}), (path.name, case["id"])
        if path.stem not in ("cases", "defects"):
            assert f'family_data("{path.stem}")' in modules or f'load_family("{path.stem}")' in modules, path.name


# --- our own cases -------------------------------------------------------------------

WEATHER = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
OWN: list[tuple[str, str, dict[str, Any]]] = [
    # (id, parser, text, expect)
    ("hermes_no_arguments", "hermes", '<tool_call>\n{"name": "now"}\n</tool_call>',
     {"calls": [("now", "{}")], "content": ""}),
    ("hermes_empty_arguments", "hermes", '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>',
     {"calls": [("now", "{}")], "content": ""}),
    ("hermes_two_calls", "hermes",
     f"<tool_call>\n{WEATHER}\n</tool_call>\n<tool_call>\n{WEATHER.replace('Paris', 'Oslo')}\n</tool_call>",
     {"calls": [("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Oslo"}')], "content": ""}),
    ("hermes_non_ascii", "hermes",
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich 東京 🌧"}}\n</tool_call>',
     {"calls": [("get_weather", '{"city": "Zürich 東京 🌧"}')], "content": ""}),
    ("hermes_text_before", "hermes", f"Let me check.\n\n<tool_call>\n{WEATHER}\n</tool_call>",
     {"calls": [("get_weather", '{"city": "Paris"}')], "content": "Let me check.\n\n"}),
    ("hermes_text_after", "hermes", f"<tool_call>\n{WEATHER}\n</tool_call>\nDone.",
     {"calls": [("get_weather", '{"city": "Paris"}')], "content": "\nDone."}),
    ("hermes_tricky_strings", "hermes",
     '<tool_call>\n{"name": "echo", "arguments": {"s": "a}b</tool_call>{\\"x\\": [1, {}]}", '
     '"n": {"d": {"e": [1, 2, {"f": "}"}]}}}}\n</tool_call>',
     {"calls": [("echo", '{"s": "a}b</tool_call>{\\"x\\": [1, {}]}", "n": {"d": {"e": [1, 2, {"f": "}"}]}}}')],
      "content": ""}),
    ("hermes_malformed_last", "hermes", f"<tool_call>\n{WEATHER}\n</tool_call>\n<tool_call>\n{{oops}}\n</tool_call>",
     # the layout newline before the broken call joins its text: content is not layout any more
     {"calls": [("get_weather", '{"city": "Paris"}')], "content": "\n{oops}\n", "errors": 1}),
    ("hermes_cut_before_name", "hermes", 'Hi <tool_call>\n{"na',
     {"calls": [], "content": 'Hi {"na', "errors": 1}),
    ("hermes_partial_marker_at_end", "hermes", "Answer: 4 <tool_ca",
     {"calls": [], "content": "Answer: 4 <tool_ca"}),
    ("hermes_scalar_args", "hermes", '<tool_call>{"name": "f", "arguments": 12.5e3}</tool_call>',
     {"calls": [("f", "12.5e3")], "content": ""}),
    ("llama3_python_tag", "llama3_json",
     '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
     {"calls": [("get_weather", '{"city": "Paris"}')], "content": ""}),
    ("llama3_plain_json_answer", "llama3_json", '{"city": "Paris", "temp": 21}',
     {"calls": [], "content": '{"city": "Paris", "temp": 21}'}),
    ("llama3_text_answer", "llama3_json", "The weather is {sunny}.",
     {"calls": [], "content": "The weather is {sunny}."}),
    # found by the random test in test_message_stream.py: the first object's content must keep the
    # leading whitespace whichever way it turns out not to be a call. Its first key already
    # says it is no call (so no malformed-call error), whatever invalid JSON follows.
    ("llama3_leading_ws_not_call_then_invalid", "llama3_json", '\n{"f{"a": 1}',
     {"calls": [], "content": '\n{"f{"a": 1}', "errors": 0}),
    ("llama3_empty_params", "llama3_json", '{"name": "now", "parameters": {}}',
     {"calls": [("now", "{}")], "content": ""}),
    # the rule for an unfinished call: kept as written, streamed and not, never "tool_calls"
    ("llama3_cut_off", "llama3_json", '{"name": "f", "parameters": {"a": [1, 2',
     {"calls": [("f", '{"a": [1, 2')], "content": "", "errors": 1, "unfinished": [0]}),
    ("mistral_v11_two", "mistral_v11", '[TOOL_CALLS]get_weather{"city": "Paris"}[TOOL_CALLS]now{}',
     {"calls": [("get_weather", '{"city": "Paris"}'), ("now", "{}")], "content": ""}),
    ("mistral_v13_args", "mistral_v13", 'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Zürich"}',
     {"calls": [("get_weather", '{"city": "Zürich"}')], "content": "Sure."}),
    ("mistral_array_two_no_args", "mistral", '[TOOL_CALLS] [{"name": "a"}, {"name": "b", "arguments": {"x": "]"}}]',
     {"calls": [("a", "{}"), ("b", '{"x": "]"}')], "content": ""}),
    ("mistral_marker_in_string", "mistral", '[TOOL_CALLS] [{"name": "a", "arguments": {"x": "[TOOL_CALLS]"}}]',
     {"calls": [("a", '{"x": "[TOOL_CALLS]"}')], "content": ""}),
    # issue 11: outputs that lost or corrupted a call
    ("mistral_array_cut_in_second_call", "mistral",
     '[TOOL_CALLS] [{"name": "f", "arguments": {"a": 1}}, {"name": "g", "argum',
     {"calls": [("f", '{"a": 1}')], "content": '{"name": "g", "argum', "errors": 1}),
    ("hermes_two_objects_in_one_block", "hermes",
     '<tool_call>\n{"name": "a", "arguments": {}}\n{"name": "b", "arguments": {"k": 1}}\n</tool_call>',
     {"calls": [("a", "{}"), ("b", '{"k": 1}')], "content": ""}),
    ("hermes_string_arguments_unwrapped", "hermes",
     '<tool_call>\n{"name": "f", "arguments": "{\\"param\\": \\"x\\"}"}\n</tool_call>',
     {"calls": [("f", '{"param": "x"}')], "content": ""}),
    ("hermes_string_arguments_not_an_object_kept", "hermes",
     '<tool_call>\n{"name": "f", "arguments": "just text"}\n</tool_call>',
     {"calls": [("f", '"just text"')], "content": ""}),
    ("hermes_text_between_json_and_marker_is_content", "hermes",
     '<tool_call>\n{"name": "a", "arguments": {}} oops\n</tool_call>',
     {"calls": [("a", "{}")], "content": "oops\n", "errors": 1}),
    ("hermes_cut_after_name", "hermes", '<tool_call>\n{"name": "delete_all", "',
     {"calls": [], "content": '{"name": "delete_all", "', "errors": 1}),
    ("llama3_several_python_tags", "llama3_json",
     '<|python_tag|>{"name": "a", "parameters": {"x": 1}}<|python_tag|>{"name": "b", "parameters": {}}',
     {"calls": [("a", '{"x": 1}'), ("b", "{}")], "content": ""}),
    ("llama3_python_tags_with_separator", "llama3_json",
     '<|python_tag|>{"name": "a", "parameters": {}}; <|python_tag|>{"name": "b", "parameters": {}}',
     {"calls": [("a", "{}"), ("b", "{}")], "content": ""}),
]


def _check_own(final: FinalMessage, expect: dict[str, Any], *, stream: bool) -> None:
    assert [(c.name, c.arguments) for c in final.tool_calls] == expect["calls"]
    assert same_text(final.content, expect["content"]), final.content
    assert final.unfinished == expect.get("unfinished", []), final.unfinished
    if "errors" in expect and not stream:
        assert len(final.errors) == expect["errors"], final.errors


@pytest.mark.parametrize("case_id,parser,text,expect", OWN, ids=[o[0] for o in OWN])
def test_own_case(case_id: str, parser: str, text: str, expect: dict[str, Any]) -> None:
    make = _make(parser)
    whole = run_nonstream(make, text)
    _check_own(whole, expect, stream=False)
    for chunks in chunkings(text).values():
        final = run_stream(make, chunks, markers=_markers(parser))
        _check_own(final, expect, stream=True)
        check_agree(final, whole)


def test_several_calls_in_one_chunk() -> None:
    text = f"<tool_call>\n{WEATHER}\n</tool_call>\n<tool_call>\n{{\"name\": \"now\"}}\n</tool_call>"
    stream = _make("hermes")()
    delta = stream.feed(text)
    assert delta is not None and delta.content is None
    assert [(d.index, d.name, d.arguments) for d in delta.tool_calls] == [
        (0, "get_weather", ""), (0, None, '{"city": "Paris"}'), (1, "now", ""), (1, None, "{}"),
    ]
    assert stream.finish() is None


def test_marker_split_across_chunks_is_held_back() -> None:
    stream = _make("hermes")()
    first = stream.feed("Sure <tool_")
    assert first is not None and first.content == "Sure "
    assert stream.feed("cal") is None
    delta = stream.feed('l>\n{"name": "get_weather", "argu')
    assert delta is None or not delta.tool_calls  # the header waits for the arguments to start
    delta = stream.feed('ments": {"city": "Pa')
    assert [(d.index, d.name, d.arguments) for d in delta.tool_calls] == [(0, "get_weather", ""),
                                                                          (0, None, '{"city": "Pa')]
    delta = stream.feed('ris"}}\n</tool_call>')
    assert [d.arguments for d in delta.tool_calls] == ['ris"}']


def test_unknown_name_dropped_and_never_streamed() -> None:
    text = (
        '<tool_call>\n{"name": "rm_rf", "arguments": {"path": "/"}}\n</tool_call>\n'
        f"<tool_call>\n{WEATHER}\n</tool_call>"
    )
    make = _make("hermes", tool_names=["get_weather"])
    for chunks in chunkings(text).values():
        final = run_stream(make, chunks, markers=_markers("hermes"))
        assert [(c.name, c.arguments) for c in final.tool_calls] == [("get_weather", '{"city": "Paris"}')]
        assert len(final.dropped) == 1 and "rm_rf" in final.dropped[0] and "get_weather" in final.dropped[0]
    assert run_nonstream(make, text).dropped == final.dropped


def test_streamed_call_turning_malformed_keeps_what_was_sent() -> None:
    stream = _make("hermes")()
    stream.feed('<tool_call>\n{"name": "f", "arguments": {"a": 1}')
    # invalid after the name was sent: what was sent stays, the text after the call goes on
    delta = stream.feed(" oops </tool_call> more")
    assert delta is not None and delta.content == " more" and not delta.tool_calls
    assert stream.finish() is None
    final = stream.final_message()
    assert [(c.name, c.arguments) for c in final.tool_calls] == [("f", '{"a": 1}')]
    assert final.content == " more"
    assert any("kept as written" in e for e in final.errors) and final.unfinished == [0]


def test_ids_are_stable_and_unique() -> None:
    stream = _make("hermes")()
    text = f"<tool_call>{WEATHER}</tool_call><tool_call>{WEATHER}</tool_call>"
    streamed_ids = []
    for ch in text:
        delta = stream.feed(ch)
        streamed_ids += [d.id for d in (delta.tool_calls if delta else ()) if d.id is not None]
    stream.finish()
    final = stream.final_message()
    assert streamed_ids == [c.id for c in final.tool_calls] == list(stream.parsed.tool_call_ids)
    assert len(set(streamed_ids)) == 2


def test_registry_and_detection() -> None:
    assert set(TOOL_PARSERS) >= {"hermes", "llama3_json", "mistral", "mistral_v11"}
    for name in TOOL_PARSERS:
        parser = get_tool_parser(name)
        assert parser.name == name and isinstance(parser.format, CallFormat)
        assert parser.format.trigger and (parser.format.section_begin + parser.format.call_begin).startswith(
            parser.format.trigger
        )
    with pytest.raises(ValueError, match="hermes"):
        get_tool_parser("nope")
    assert detect_tool_parser("{% for t in tools %}<tool_call>{{ t }}</tool_call>{% endfor %}") == "hermes"
    assert detect_tool_parser("<|start_header_id|>ipython<|end_header_id|><|python_tag|>") == "llama3_json"
    assert detect_tool_parser(
        '<|start_header_id|>user Respond in the format {"name": function name, "parameters": dict}'
    ) == "llama3_json"
    assert detect_tool_parser("[AVAILABLE_TOOLS] {{ tools|tojson }}[/AVAILABLE_TOOLS][TOOL_CALLS] ") == "mistral"
    assert detect_tool_parser('{{ "[TOOL_CALLS]" + call.name + call.arguments }}') == "mistral_v11"
    assert detect_tool_parser("[TOOL_CALLS]{{ name }}[ARGS]{{ args }}") == "mistral_v13"
    assert detect_tool_parser("{{ messages }}") is None


def test_format_data_round_trips_through_the_parser() -> None:
    """Text written exactly as ``format`` says parses back to the same calls (formats whose
    arguments are JSON; the XML styles' round trip is each family's grammar test: the grammar
    accepts the real call text the parser reads)."""
    calls = [("get_weather", '{"city": "Paris"}'), ("now", "{}")]
    for name in TOOL_PARSERS:
        parser = get_tool_parser(name)
        f = parser.format
        if f.arguments_style != "json":
            continue
        body = f.separator.join(f.call_begin + n + f.name_end + a + f.call_end for n, a in calls)
        text = f.section_begin + body + f.section_end
        got = parser.parse(text, final=True)
        assert [(c.name, c.arguments) for c in got.tool_calls] == calls, name
        assert got.content == "" and got.errors == ()


JSON_TEXTS = [
    '{"a": [1, -2.5e+3, true, false, null, {"b": "x\\"}\\u00e9\\n"}], "c": {}}',
    '[{"k": []}, "s", 0, {"z": [[[]]]}]',
    '{"a": 01}', '{"a": tru}', '{"a": "\\x"}', '{"a" 1}', '[1,]', '{"a": 1,}', '{"a": "tab\there"}',
]


@pytest.mark.parametrize("text", JSON_TEXTS)
def test_scan_value_every_prefix_with_and_without_cache(text: str) -> None:
    from tool_parsers._scan import JsonError, ScanCache, scan_value

    def scan(t: str) -> object:
        try:
            return scan_value(t, 0)
        except JsonError:
            return "invalid"

    try:
        json.loads(text)
        valid = True
    except ValueError:
        valid = False
    cache = ScanCache()
    for k in range(1, len(text) + 1):
        plain = scan(text[:k])
        with cache.active():
            cached = scan(text[:k])
        assert plain == cached, (text[:k], plain, cached)
        if k < len(text) and valid:
            assert plain is None, text[:k]  # a proper prefix of a valid value is "cut off"
    assert scan(text) == (len(text) if valid else "invalid")


def test_scan_value_in_c_and_in_python_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole object or array is read by Python's C JSON scanner; whatever it refuses (cut off,
    invalid, NaN or Infinity, too deep) goes to the scan. Every prefix of texts JSON and not, and
    random texts of JSON's characters: the same end, "cut off" or "invalid" either way, and the C
    reader answers for a good share of them (this test fails if it never does)."""
    import random

    from tool_parsers import _scan
    from tool_parsers._scan import JsonError, scan_value

    def scan(t: str, pos: int) -> object:
        try:
            return scan_value(t, pos)
        except JsonError:
            return "invalid"

    texts = JSON_TEXTS + ['{"a": NaN}', '[Infinity]', '[-Infinity, 1]', '{"a": 1} tail', '[1] ]', '{"a":\t[ ]\n}',
                          '{"e": "\\ud800"}', '[1.5e-3, 0, -0, 1E9]', '[1.]', '[.5]', '{"a": "\u0001"}',
                          "[" * 3000 + "]" * 3000, '{"é": "ü"}']
    rng = random.Random(7)
    texts += ["".join(rng.choice('{}[]",:0123456789-.eEtrufalsn \\ax') for _ in range(rng.randint(1, 24)))
              for _ in range(3000)]
    in_c = 0
    for text in texts:
        for k in range(1, len(text) + 1):
            piece = text[:k] if len(text) < 200 else text
            for pos in {0, min(1, len(piece) - 1)}:
                monkeypatch.setattr(_scan, "WHOLE_IN_C", False)
                slow = scan(piece, pos)
                monkeypatch.setattr(_scan, "WHOLE_IN_C", True)
                fast = scan(piece, pos)
                assert fast == slow, (piece, pos, fast, slow)
                in_c += isinstance(fast, int) and piece[pos] in "{["
            if len(text) >= 200:
                break
    assert in_c > 100, in_c
    # growing texts through one cache (a resumed scan, or C when the scan stopped far back)
    from tool_parsers._scan import ScanCache
    long = '{"a": [1, 2, {"b": "' + "x" * 40 + '"}], "c": {"d": [true, null, -1.5e3]}, "e": "\\u00e9"}'
    for text in [*JSON_TEXTS, long, long.replace("true", "tru"), long[:-1] + "]"]:
        for step in (1, 7, 40):
            cache = ScanCache()
            for k in range(step, len(text) + step, step):
                monkeypatch.setattr(_scan, "WHOLE_IN_C", False)
                slow = scan(text[:k], 0)
                monkeypatch.setattr(_scan, "WHOLE_IN_C", True)
                with cache.active():
                    assert scan(text[:k], 0) == slow, (text[:k], step)


# Checkpoints: what a parse says is settled must be what every longer text's parse starts
# with, and parsing on from the checkpoint must give the rest (streams rely on it to parse
# only new text). Random texts from the pieces parsers care about; every prefix pair.
@pytest.mark.parametrize("parser", TOOL_PARSERS)
def test_checkpoints_hold_for_every_continuation(parser: str) -> None:
    import random

    from tests.unit.test_message_stream import _PIECES

    rng = random.Random(f"checkpoints-{parser}")
    texts = ["".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 8))) for _ in range(40)]
    checked = checkpoint_checks(get_tool_parser(parser), texts)
    assert checked > 1000  # the texts did produce checkpoints


@pytest.mark.parametrize("parser", ["hermes", "llama3_json", "mistral"])
def test_malformed_region_ends_where_parsing_resumes(parser: str) -> None:
    text = {
        "hermes": '<tool_call>\n{"name": "f", "arguments": {"a": 1,,}}\n</tool_call>\n<tool_call>\n'
                  '{"name": "g", "arguments": {}}\n</tool_call>',
        "llama3_json": '<|python_tag|>{"name": "f", "parameters": {"a": 1,,}}<|python_tag|>'
                       '{"name": "g", "parameters": {}}',
        "mistral": '[TOOL_CALLS] [{"name": "f", "arguments": {"a": 1,,}}][TOOL_CALLS] [{"name": "g", "arguments": {}}]',
    }[parser]
    got = get_tool_parser(parser).parse(text, final=True)
    assert [(c.name, c.arguments) for c in got.tool_calls] == [("g", "{}")]
    assert '"a": 1,,' in got.content and len(got.errors) == 1
    (start, end), = got.malformed
    assert start in (0, text.index("{")) and end is not None and text[end:].lstrip("\n").startswith(get_tool_parser(parser).start)
    cut = text.index(",,") + 3  # streaming: the region stays open until its end is seen
    assert get_tool_parser(parser).parse(text[:cut], final=False).malformed == ((start, None),)


@pytest.mark.parametrize(("old", "added", "grows"), [
    ('{"text": "lorem', " ipsum", True),          # plain text inside a value string
    ('{"te', "xt", True),                         # inside a key
    ('{"text": "lorem', ' ip"', False),            # the string ends: scan
    ('{"text": "lorem', " a\\nb", False),          # an escape: scan
    ('{"text": "lorem', " a\tb", False),           # a raw control character (invalid JSON): scan
    ('{"text": "lorem\\', "n more", False),        # an escape was pending at the end
    ('{"n": 12', "3", False),                      # not inside a string
])
def test_scan_cache_grows_inside_a_string_exactly_as_a_scan_would(old: str, added: str, grows: bool) -> None:
    from tool_parsers._scan import JsonError, ScanCache, scan_value

    cache = ScanCache()
    with cache.active():
        assert scan_value(old, 0) is None
    new = old + added
    assert cache.grow_inside_string(old, new) is grows
    if grows:
        fresh = ScanCache()
        with fresh.active():
            assert scan_value(new, 0) is None  # a scan says the same: still open and valid
        assert cache._entries == fresh._entries
        more = new + ('"}' if '": "' in new else '": 1}')  # the value's string, or the key's, closed
        with cache.active():
            assert scan_value(more, 0) == len(more)  # later scans resume from the noted state
    else:
        try:
            with cache.active():
                scan_value(new, 0)  # the normal scan still works after a refusal
        except JsonError:
            pass


def test_scan_cache_grows_only_the_text_it_last_scanned() -> None:
    from tool_parsers._scan import ScanCache, scan_value

    cache = ScanCache()
    with cache.active():
        scan_value('{"a": "x', 0)
    assert not cache.grow_inside_string('{"a": "y', '{"a": "yz')  # another text: scan it


def _markers_of(name: str) -> list[str]:
    """Every marker a family's parser knows: its call format's pieces, its start and end, and a
    module's own ``MARKERS`` (section and channel markers the format does not list)."""
    import sys

    parser = get_tool_parser(name)
    f = parser.format
    pieces = [f.trigger, f.section_begin, f.call_begin, f.name_end, f.call_end, f.separator, f.section_end,
              parser.start, parser.end, *getattr(sys.modules[type(parser).__module__], "MARKERS", ())]
    return sorted({p for p in pieces if p.strip()})


@pytest.mark.parametrize("parser", TOOL_PARSERS)
def test_every_parse_ends_whatever_the_markers_stand(parser: str) -> None:
    """Any text ends its parse: each marker alone in content, twice, or out of place, and a whole
    call with a marker dropped or added, at every prefix, final or not. (A parser loop that could
    stop at a stray marker without moving on would hang the server on that model output.)"""
    p = get_tool_parser(parser).with_tools({"f": {"type": "object", "properties": {"a": {"type": "integer"}}}})
    call = p.write([("f", {"a": 1})])
    texts = [call, call + call]
    for m in _markers_of(parser):
        texts += [f"hello {m} tail", m, m + m, f"{m}{call}", f"{call}{m}", call.replace(m, "", 1),
                  call.replace(m, m + m, 1), f"a{m}b{m}c"]
    rng = random.Random(parser)  # and markers mixed at random with JSON and XML punctuation
    atoms = _markers_of(parser) + ["f", "a", "1", " ", "\n", "{", "}", "[", "]", '"', ":", ",", "=", "<", ">", "/", "("]
    texts += ["".join(rng.choice(atoms) for _ in range(rng.randrange(2, 14))) for _ in range(60)]
    with ends_within(20, f"{parser}: a parse"):
        for text in texts:
            for end in range(len(text) + 1):
                for final in (False, True):
                    p.parse(text[:end], final=final)
