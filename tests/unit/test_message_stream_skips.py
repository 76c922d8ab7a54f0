"""server/messages/message_stream.py: the chunks a stream sends without a parse (the ``SKIP_*`` rules),
each against a parse of every chunk: the same delta at every chunk, the same message, fewer parses."""
from __future__ import annotations

import dataclasses
import random
import re

import pytest

from reasoning_parsers import REASONING_PARSERS, get_reasoning_parser
from server.messages import message_stream
from server.messages.call_head import call_head
from server.messages.message_stream import FinalMessage, MessageDelta, MessageStream
from tool_parsers import TOOL_PARSERS, get_tool_parser

_HELD = [p for p in TOOL_PARSERS if get_tool_parser(p).held_inert is not None]


def _counted_stream(parser: object, names: list[str], parses: dict[bool, int], key: bool,
                    monkeypatch: pytest.MonkeyPatch) -> MessageStream:
    """A streaming MessageStream (repeat guard on, ids call_0...) whose parses add up in ``parses[key]``."""
    ids = iter(f"call_{k}" for k in range(100))
    stream = MessageStream(tool_parser=parser, reasoning_parser=None, tool_names=names,  # type: ignore[arg-type]
                           id_factory=lambda: next(ids), guard_repeats=True)
    advance = stream._advance

    def counted(*, final: bool) -> MessageDelta | None:
        parses[key] += 1
        return advance(final=final)

    monkeypatch.setattr(stream, "_advance", counted)
    return stream


@pytest.mark.parametrize("parser", _HELD)
def test_a_held_call_skips_inert_chunks_and_sends_the_same_deltas(parser: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``ToolParser.held_inert``: while a call's name is being written, chunks of only letters,
    digits, ``_`` and spaces are not parsed. Against a parse of every chunk: the same message and
    the same deltas put together, each well-formed call's first delta at the same chunk, fewer parses."""
    from bench.parse_cost import tokens_of

    p = get_tool_parser(parser)
    names = ["calculate_triangle_area_2", "get weather", "f"]
    rng = random.Random(f"held-{parser}")
    parses = {False: 0, True: 0}
    for i in range(40):
        calls = [(rng.choice(names), {"base": rng.randint(0, 99), "note": "a b_c"}) for _ in range(rng.randint(1, 3))]
        text = rng.choice(["", "Sure, calling it now. "]) + p.write(calls)
        well_formed = i % 3 != 2
        if not well_formed:  # cut, or a word where JSON punctuation belongs
            text = rng.choice([text[: rng.randint(1, len(text))], text.replace('", "', '" bogus "', 1)])
        chunks = tokens_of(text) if i % 2 else [text[k:k + 3] for k in range(0, len(text), 3)]
        got = {}
        for skip in (False, True):
            monkeypatch.setattr(message_stream, "SKIP_HELD", skip)
            stream = _counted_stream(p, names, parses, skip, monkeypatch)
            deltas = [stream.feed(c) for c in chunks] + [stream.finish()]
            firsts = [k for k, d in enumerate(deltas) for tc in (d.tool_calls if d else ()) if tc.id is not None]
            got[skip] = (stream.final_message(), stream.parsed, firsts)
        assert got[True][:2] == got[False][:2], (text, chunks)
        if well_formed:
            assert got[True][2] == got[False][2], (text, chunks)
    assert parses[True] < 0.9 * parses[False], parses  # (a name of several tokens is skipped over)


def _stream_deltas(parser: str, chunks: list[str], names: list[str], monkeypatch: pytest.MonkeyPatch, *,
                   skip: bool, parses: dict[bool, int]) -> tuple[list[MessageDelta | None], FinalMessage]:
    monkeypatch.setattr(message_stream, "SKIP_WAIT", skip)
    stream = _counted_stream(get_tool_parser(parser), names, parses, skip, monkeypatch)
    deltas = [stream.feed(c) for c in chunks] + [stream.finish()]
    return deltas, stream.final_message()


@pytest.mark.parametrize("parser", TOOL_PARSERS)
def test_a_marker_being_written_skips_the_parse_and_sends_the_same_deltas(parser: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """``ParsedTools.wait``: while the text ends in a marker being written (a call's start marker in
    prose, the end marker after a call), a chunk that leaves it a proper prefix of that marker is
    not parsed. Against a parse of every chunk: the same delta at every chunk, the same message,
    under every chunking, for well-formed, cut and broken calls and prose holding marker prefixes."""
    from bench.parse_cost import tokens_of
    from tool_parsers._blocks import BlockToolParser

    p = get_tool_parser(parser)
    names = ["calculate_area", "f"]
    rng = random.Random(f"wait-{parser}")
    markers = [m for m in (p.start, p.end, getattr(p, "call_open", "")) if m]
    parses = {False: 0, True: 0}
    for i in range(40):
        calls = [(rng.choice(names), {"base": rng.randint(0, 99), "note": "a b"}) for _ in range(rng.randint(1, 2))]
        prose = rng.choice(["", "Sure. ", "See " + rng.choice(markers)[:-1] + " here. ",
                            "A long answer first. " * 15])  # (longer than the stream settles at once)
        text = prose + p.write(calls) + rng.choice(["", " Done.", "\n" + rng.choice(markers)[: 3]])
        if i % 4 == 3:
            text = text[: rng.randint(1, len(text))]
        elif i % 4 == 2:
            text = text.replace('"base"', '"base" oops', 1).replace("base=", "base oops=", 1)
        size = rng.randint(1, 4)
        for chunks in (tokens_of(text), [text[k:k + size] for k in range(0, len(text), size)]):
            slow = _stream_deltas(parser, chunks, names, monkeypatch, skip=False, parses=parses)
            fast = _stream_deltas(parser, chunks, names, monkeypatch, skip=True, parses=parses)
            assert fast == slow, (text, chunks)
    if isinstance(p, BlockToolParser):  # (they hold a start marker written in prose: ParsedTools.wait)
        assert parses[True] < 0.97 * parses[False], parses


_PROSE = [p for p in TOOL_PARSERS if get_tool_parser(p).prose_inert() is not None]


@pytest.mark.parametrize("parser", _PROSE)
def test_prose_skips_the_parse_and_sends_the_same_deltas(parser: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ToolParser.prose_inert``: in prose (no call, no held marker), a chunk that cannot begin a
    call is sent as content without a parse. Against a parse of every chunk: the same delta at every
    chunk and the same message, for prose before, between and after calls (allowed, unknown, cut,
    broken), blank runs, and prose holding marker-like text; and far fewer parses."""
    from bench.parse_cost import tokens_of

    p = get_tool_parser(parser)
    names = ["calculate_area", "f"]
    rng = random.Random(f"prose-{parser}")
    parses = {False: 0, True: 0}
    plain = ["Sure, ", "the area is 12. ", "\n\n", "  ", "a < b and c > d ", "x" * 30 + " ", "ok. ", "\t"]
    words = [*plain, p.start + "[] ", p.start + "{} "]  # (blocks with no call)
    for i in range(60):
        text = "".join(rng.choice(words) for _ in range(rng.randint(0, 8 if i % 5 else 80)))  # (some past a settle)
        for _ in range(rng.randint(0, 2)):
            name = rng.choice([*names, "unknown_tool"])
            text += p.write([(name, {"base": rng.randint(0, 99)})]) + "".join(rng.choice(words) for _ in range(3))
        if i % 4 == 3:
            text = text[: rng.randint(1, len(text))] if text else text
        elif i % 4 == 2:
            text = text.replace('"base"', '"base" oops', 1)
        size = rng.randint(1, 5)
        for chunks in (tokens_of(text), [text[k:k + size] for k in range(0, len(text), size)]):
            got = {}
            for skip in (False, True):
                monkeypatch.setattr(message_stream, "SKIP_CONTENT", skip)
                deltas, final = _stream_deltas(parser, chunks, names, monkeypatch, skip=True, parses=parses)
                # (an error names offsets in the text not settled yet, which fewer parses settle later)
                errors = [re.sub(r"offset \d+", "offset N", e) for e in final.errors]
                got[skip] = (deltas, dataclasses.replace(final, errors=errors))
            assert got[True] == got[False], (text, chunks)
    monkeypatch.setattr(message_stream, "SKIP_CONTENT", False)
    slow = {False: 0, True: 0}
    prose = tokens_of("".join(rng.choice(plain) for _ in range(200)))
    _stream_deltas(parser, prose, names, monkeypatch, skip=True, parses=slow)
    monkeypatch.setattr(message_stream, "SKIP_CONTENT", True)
    fast = {False: 0, True: 0}
    _stream_deltas(parser, prose, names, monkeypatch, skip=True, parses=fast)
    assert fast[True] < 0.5 * slow[True], (fast, slow)


_HEADS = [p for p in TOOL_PARSERS if call_head(get_tool_parser(p), 0) is not None]


@pytest.mark.parametrize("parser", _HEADS)
@pytest.mark.parametrize("early_names", [False, True])
def test_a_call_head_skips_the_parse_and_sends_the_same_deltas(parser: str, early_names: bool,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``CallHead``: from a call's start marker until its arguments begin, a chunk that leaves the text a
    prefix of the family's head (``call_begin``, the name, ``name_end``) is not parsed. Against a parse
    of every chunk: the same delta at every chunk and the same message, under BPE-like, fixed-size and
    one-character chunkings (a small vocabulary writes a head in many chunks), for well-formed, cut,
    broken and unknown calls, and heads written otherwise (other spacing); and fewer parses."""
    from bench.parse_cost import tokens_of

    p = get_tool_parser(parser)
    names = ["calculate_area", "f"]
    rng = random.Random(f"head-{parser}-{early_names}")
    parses = {False: 0, True: 0}
    for i in range(30):
        calls = [(rng.choice([*names, "unknown_tool"]), {"base": rng.randint(0, 99), "note": "a b"})
                 for _ in range(rng.randint(1, 2))]
        text = rng.choice(["", "Sure. ", "A long answer first. " * 15]) + p.write(calls) + rng.choice(["", " Done."])
        if i % 5 == 4:
            text = text[: rng.randint(1, len(text))]
        elif i % 5 == 3:
            text = text.replace('"name": "', '"name":  "', 1).replace('", "arguments"', '" , "arguments"', 1)
        elif i % 5 == 2:
            text = text.replace('"arguments": ', '"arguments" oops ', 1).replace("=", " oops=", 1)
        size = rng.randint(2, 4)
        for chunks in (tokens_of(text), [text[k:k + size] for k in range(0, len(text), size)], list(text)):
            got = {}
            for skip in (False, True):
                monkeypatch.setattr(message_stream, "SKIP_HEAD", skip)
                stream = MessageStream(tool_parser=p, reasoning_parser=None, tool_names=names, guard_repeats=True,
                                       id_factory=iter(f"call_{k}" for k in range(100)).__next__,
                                       early_names=early_names)
                advance = stream._advance

                def counted(*, final: bool, advance: object = advance, skip: bool = skip) -> MessageDelta | None:
                    parses[skip] += 1
                    return advance(final=final)  # type: ignore[operator]

                monkeypatch.setattr(stream, "_advance", counted)
                deltas = [stream.feed(c) for c in chunks] + [stream.finish()]
                got[skip] = (deltas, stream.final_message())
            assert got[True] == got[False], (text, chunks)
    from tool_parsers._blocks import BlockToolParser

    if isinstance(p, BlockToolParser):  # (a whole start marker is where a head begins: ParsedTools.wait)
        assert parses[True] < parses[False], parses
    if parser == "hermes":  # (its head holds seven quotes: ChatML vocabularies write them in separate chunks)
        assert parses[True] < 0.8 * parses[False], parses


def test_a_call_head_moves_with_the_settled_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A head begun after a prose long enough to settle is placed in the unsettled text: the stream
    skips the head's chunks after the parse that settled the prose, and parses the name's end and
    the arguments' start."""
    chunks = [*(["word "] * 60), "<tool", "_call", ">", "\n", '{"', "name", '"', ":", ' "', "f", '"', ",", ' "',
              "arguments", '"', ":", " {", "}}", "\n", "</tool_call>"]
    parses = {False: 0, True: 0}
    got = {}
    for skip in (False, True):
        monkeypatch.setattr(message_stream, "SKIP_HEAD", skip)
        counts = {False: 0, True: 0}
        got[skip] = _stream_deltas("hermes", chunks, ["f"], monkeypatch, skip=True, parses=counts)
        parses[skip] = counts[True]
    assert got[True] == got[False]
    assert [(c.name, c.arguments) for c in got[True][1].tool_calls] == [("f", "{}")]
    assert parses[True] <= parses[False] - 5, parses  # ('{"', '"', ' "', ' "' and '"': inside the head)


def test_a_marker_wait_moves_with_the_settled_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """The held marker's start is kept relative to the unsettled text: a parse that settles a long
    prose and holds ``<tool`` after it still sends ``<tooll`` (no marker) at the next chunk."""
    prose = "word " * 60  # longer than what the stream settles at once
    chunks = [prose + "<tool", "l", "s", " <tool", "_call", ">", '\n{"name": "f", "arguments": {}}\n</tool_call>']
    parses = {False: 0, True: 0}
    slow = _stream_deltas("hermes", chunks, ["f"], monkeypatch, skip=False, parses=parses)
    fast = _stream_deltas("hermes", chunks, ["f"], monkeypatch, skip=True, parses=parses)
    assert fast == slow
    assert fast[0][1] == slow[0][1] and fast[0][1].content == "<tooll"  # (the held text, sent as the chunk came)
    assert parses[True] == parses[False] - 2  # "_call", and ">" (the start marker whole: nothing to send yet)


@pytest.mark.parametrize(("last", "finals"), [(">", [True]), ("</tool_call", [False, True])])
def test_finish_parses_again_only_text_not_parsed_yet(last: str, finals: list[bool],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """When the last feed parsed all the text and sent it, finish() runs only the final parse (the
    non-final one would repeat it); after text the stream skipped, both."""
    stream = MessageStream(tool_parser=get_tool_parser("hermes"), reasoning_parser=None, tool_names=["f"])
    for chunk in ['<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n', "</tool_call", ">"][: 3 if last == ">" else 2]:
        stream.feed(chunk)
    seen: list[bool] = []
    advance = stream._advance

    def counted(*, final: bool) -> MessageDelta | None:
        seen.append(final)
        return advance(final=final)

    monkeypatch.setattr(stream, "_advance", counted)
    stream.finish()
    assert seen == finals
    assert [(c.name, c.arguments) for c in stream.final_message().tool_calls] == [("f", '{"a": 1}')]



@pytest.mark.parametrize("name", REASONING_PARSERS)
def test_reasoning_skips_the_parse_and_sends_the_same_deltas(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ReasoningParser.inert``: inside the thinking block, with nothing held back, a chunk that
    cannot begin the block's end is sent as reasoning without a split. Against a split of every
    chunk: the same delta at every chunk and the same message, with and without a tool parser,
    thinking on and off, blocks that end, stay open, hold partial end markers or a call; and far
    fewer parses in a long block."""
    from bench.parse_cost import tokens_of

    base = get_reasoning_parser(name)
    tool = get_tool_parser("hermes")
    rng = random.Random(f"reasoning-{name}")
    words = ["Let me think. ", "the area is 12. ", "\n\n", "  ", "a < b and c > d ", "x" * 30 + " ", "thought\n",
             base.end[:-1] + " ", base.end[: len(base.end) // 2], base.start[:-1], "[1] {2} | "]

    def stream(text: str, chunks: list[str], *, skip: bool, thinking: bool, tools: bool,
               counts: dict[bool, int]) -> tuple[list[MessageDelta | None], FinalMessage]:
        monkeypatch.setattr(message_stream, "SKIP_REASONING", skip)
        parser = get_reasoning_parser(name, thinking=thinking, tool_start=(tool.start,) if tools else ())
        ids = iter(f"call_{k}" for k in range(100))
        s = MessageStream(tool_parser=tool if tools else None, reasoning_parser=parser, tool_names=["f"],
                          id_factory=lambda: next(ids))
        advance = s._advance

        def counted(*, final: bool) -> MessageDelta | None:
            counts[skip] += 1
            return advance(final=final)

        monkeypatch.setattr(s, "_advance", counted)
        return [s.feed(c) for c in chunks] + [s.finish()], s.final_message()

    counts = {False: 0, True: 0}
    for i in range(60):
        thinking, tools = i % 3 != 2, i % 2 == 0
        body = "".join(rng.choice(words) for _ in range(rng.randint(0, 8 if i % 5 else 90)))
        text = rng.choice(["", base.start, " " + base.start]) + body
        if i % 4 != 3:  # the block ends (or a call ends it), then content or a call
            text += rng.choice([base.end, base.end + "\n", tool.write([("f", {"a": 1})])])
            text += rng.choice(["", "The answer is 12.", tool.write([("f", {"a": 2})])])
        size = rng.randint(1, 5)
        for chunks in (tokens_of(text), [text[k:k + size] for k in range(0, len(text), size)]):
            got = {skip: stream(text, chunks, skip=skip, thinking=thinking, tools=tools, counts=counts)
                   for skip in (False, True)}
            assert got[True] == got[False], (text, chunks)
    long = tokens_of(base.start + "".join(rng.choice(words[:6]) for _ in range(200)) + base.end + "Done.")
    slow, fast = {False: 0, True: 0}, {False: 0, True: 0}
    stream("", long, skip=False, thinking=True, tools=True, counts=slow)
    stream("", long, skip=True, thinking=True, tools=True, counts=fast)
    assert fast[True] < 0.5 * slow[False], (fast, slow)


_JSON_ARGUMENTS = [p for p in TOOL_PARSERS if get_tool_parser(p).raw_arguments]


@pytest.mark.parametrize("parser", _JSON_ARGUMENTS)
def test_a_call_the_repeat_guard_holds_grows_without_a_parse(parser: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call to a function already called is held till it is whole (it may be a repeat); while its
    arguments stay an open, valid JSON value, a chunk is not parsed. Against a parse of every chunk:
    the same delta at every chunk and the same message, for turns with repeats and broken calls too."""
    from bench.parse_cost import tokens_of

    p = get_tool_parser(parser)
    rng = random.Random(f"guard-held-{parser}")
    parses = {False: 0, True: 0}
    for i in range(30):
        calls = [("save_record", {"id": rng.randint(0, 3), "tags": ["a", "b c"], "geo": {"lat": 1.5}})
                 for _ in range(rng.randint(2, 4))]
        text = p.write(calls)
        if i % 4 == 3:  # cut, or broken JSON in a later call
            text = rng.choice([text[: rng.randint(1, len(text))], text[::-1].replace(":", ";", 1)[::-1]])
        chunks = tokens_of(text) if i % 2 else [text[k:k + 4] for k in range(0, len(text), 4)]
        got = {}
        for fast in (False, True):
            monkeypatch.setattr(message_stream, "FAST_ARGUMENTS", fast)
            stream = _counted_stream(p, ["save_record"], parses, fast, monkeypatch)
            deltas = [stream.feed(c) for c in chunks] + [stream.finish()]
            got[fast] = (deltas, stream.final_message())
        assert got[True] == got[False], (text, chunks)
    assert parses[True] < 0.7 * parses[False], parses  # (the arguments of every call after the first)
