"""Reasoning parser contract: the reasoning cases of testdata/parsers/cases.json, run
non-streamed and streamed (per character, random chunks, tokens or small chunks, the
case's own deltas) through MessageStream with no tool parser, plus our own cases."""
from __future__ import annotations

from typing import Any

import pytest

from reasoning_parsers import REASONING_PARSERS, get_reasoning_parser
from server.messages.message_stream import FinalMessage, MessageStream
from tests.unit.parser_contract import check_agree, chunkings, ends_within, load_cases, run_nonstream, run_stream, same_text

# cases.json family -> (our parser, thinking enabled)
FAMILY: dict[str, tuple[str, bool]] = {
    "reasoning_deepseek_r1": ("deepseek_r1", True),
    "reasoning_qwen3": ("qwen3", True),
    # SGLang's base detector (force_reasoning=False): only an explicit <think> opens a
    # block -- exactly our parsers with thinking=False.
    "sglang_reasoning_base": ("qwen3", False),
    # OLMo 3 writes <think>...</think> like DeepSeek-R1; the case only checks the split.
    "sglang_reasoning_olmo3": ("deepseek_r1", True),
}

# Where we deliberately differ from the upstream expectation, and why.
OVERRIDES: dict[str, tuple[str, dict[str, Any]]] = {
    # vLLM's streaming path keeps the "\n" before <think> while its non-streaming path
    # (case leading_newline_nonstream) drops it. One pure function cannot disagree with
    # itself; we drop whitespace before a leading <think> in both modes.
    "reasoning_deepseek_r1/leading_newline_stream": (
        "stream == nonstream",
        {"reasoning": "This is a reasoning section", "content": "\nThis is the rest"},
    ),
}

# A case's note, not its parser, says thinking was disabled for the request.
THINKING_OFF = {"reasoning_qwen3/thinking_disabled_plain"}

CASES = load_cases(tuple(FAMILY))
MARKERS = ("<think>", "</think>")


def _key(case: dict[str, Any]) -> str:
    return f"{case['parser']}/{case['id']}"


def _parser(name: str, *, thinking: bool = True):
    """The parser as a server resolves it: Qwen3's calls are hermes' (trigger ``<tool_call>``),
    which ends a block the model forgot to close; DeepSeek-R1's cases have no calls."""
    from tool_parsers import FAMILIES

    tool_start = (FAMILIES["hermes"].format.trigger,) if name == "qwen3" else ()
    return get_reasoning_parser(name, thinking=thinking, tool_start=tool_start)


def _make(name: str, *, thinking: bool = True):
    def make(**kw: Any) -> MessageStream:
        return MessageStream(tool_parser=None, reasoning_parser=_parser(name, thinking=thinking), **kw)

    return make


def _check_expect(final: FinalMessage, expect: dict[str, Any]) -> None:
    # None and "" are equal: the upstream suites differ per mode (empty_stream: null,
    # empty_nonstream: ""), the final message uses None for empty.
    if "reasoning" in expect:
        assert same_text(final.reasoning, expect["reasoning"]), (final.reasoning, expect["reasoning"])
    if "content" in expect:
        assert same_text(final.content, expect["content"]), (final.content, expect["content"])
    if "reasoning_contains" in expect:
        assert expect["reasoning_contains"] in (final.reasoning or "")
    if "content_endswith" in expect:
        assert (final.content or "").endswith(expect["content_endswith"])


@pytest.mark.parametrize("case", CASES, ids=_key)
def test_case(case: dict[str, Any]) -> None:
    name, thinking = FAMILY[case["parser"]]
    thinking = thinking and _key(case) not in THINKING_OFF
    expect = OVERRIDES[_key(case)][1] if _key(case) in OVERRIDES else case["expect"]
    text = case.get("model_output")
    if text is None:
        text = "".join(case["model_deltas"])
    make = _make(name, thinking=thinking)
    whole = run_nonstream(make, text)
    if case["modes"] in ("nonstream", "both"):
        _check_expect(whole, expect)
    for chunks in chunkings(text, case.get("model_deltas")).values():
        final = run_stream(make, chunks, markers=MARKERS)
        check_agree(final, whole)
        if case["modes"] in ("stream", "both"):
            _check_expect(final, expect)


def test_every_reasoning_family_is_mapped() -> None:
    assert {c["parser"] for c in CASES} == set(FAMILY)
    assert len(CASES) >= 20


OWN: list[tuple[str, str, bool, str, str, str]] = [
    # id, parser, thinking, text, reasoning, rest
    ("r1_think_in_rest_kept", "deepseek_r1", True, "a</think>b</think>c", "a", "b</think>c"),
    ("r1_partial_end_at_eof", "deepseek_r1", True, "thinking </thi", "thinking </thi", ""),
    ("r1_no_tool_start", "deepseek_r1", True, "x<tool_call>y", "x<tool_call>y", ""),
    ("qwen3_tool_call_ends_reasoning", "qwen3", True, "hmm<tool_call>{}", "hmm", "<tool_call>{}"),
    ("qwen3_off_explicit_think", "qwen3", False, "<think>a</think>b", "a", "b"),
    ("qwen3_off_plain", "qwen3", False, "  plain", "", "  plain"),
    ("qwen3_non_ascii", "qwen3", True, "<think>Überlegung 思考</think>答え", "Überlegung 思考", "答え"),
    ("empty_block", "qwen3", True, "<think></think>\n\nHi", "", "\n\nHi"),
    # a call drafted while thinking is not a call: the end marker decides (issue: qwen3 #1)
    ("qwen3_tool_call_drafted_in_thinking", "qwen3", True,
     "Maybe I should emit <tool_call> later.</think>Final answer: 4",
     "Maybe I should emit <tool_call> later.", "Final answer: 4"),
    ("qwen3_tool_call_text_then_real_call", "qwen3", True,
     'Use <tool_call> maybe.</think><tool_call>{"name": "f"}</tool_call>',
     "Use <tool_call> maybe.", '<tool_call>{"name": "f"}</tool_call>'),
]


@pytest.mark.parametrize("case_id,name,thinking,text,reasoning,rest", OWN, ids=[o[0] for o in OWN])
def test_own_split(case_id: str, name: str, thinking: bool, text: str, reasoning: str, rest: str) -> None:
    parser = _parser(name, thinking=thinking)
    assert parser.split(text, final=True) == (reasoning, rest)
    make = _make(name, thinking=thinking)
    whole = run_nonstream(make, text)
    assert same_text(whole.reasoning, reasoning) and same_text(whole.content, rest)
    for chunks in chunkings(text).values():
        check_agree(run_stream(make, chunks), whole)


def test_split_holds_back_partial_markers() -> None:
    r1 = get_reasoning_parser("deepseek_r1")
    assert r1.split("\n<thi", final=False) == ("", "")
    assert r1.split("abc</th", final=False) == ("abc", "")
    assert r1.split("abc</th", final=True) == ("abc</th", "")
    qwen = _parser("qwen3")
    assert qwen.split("abc<tool_", final=False) == ("abc", "")
    assert qwen.split("abc<", final=False) == ("abc", "")


def test_registry() -> None:
    """vLLM's names; ``<think>`` families open the block in the prompt, Magistral writes ``[THINK]``."""
    assert {"deepseek_r1", "deepseek_v3", "glm45", "glm47", "kimi_k2", "mistral", "qwen3"} <= set(REASONING_PARSERS)
    for name in ("deepseek_r1", "deepseek_v3", "glm45", "glm47", "kimi_k2", "qwen3"):
        parser = get_reasoning_parser(name)
        assert name in (parser.name, *parser.aliases) and (parser.start, parser.end) == ("<think>", "</think>")
        assert parser.starts_open and parser.tool_start == ()
    assert (get_reasoning_parser("mistral").start, get_reasoning_parser("mistral").starts_open) == ("[THINK]", False)
    assert get_reasoning_parser("qwen3", tool_start=("<tool_call>",)).tool_start == ("<tool_call>",)
    with pytest.raises(ValueError, match="deepseek_r1"):
        get_reasoning_parser("nope")


@pytest.mark.parametrize("name,kwargs,effort,on", [
    ("qwen3", None, None, True), ("qwen3", {"enable_thinking": False}, None, False), ("qwen3", {}, "none", False),
    ("qwen3", {"thinking": False}, None, True),  # not Qwen3's switch
    ("deepseek_v3", None, None, False), ("deepseek_v3", {"thinking": True}, None, True),
    ("deepseek_v3", {"enable_thinking": True}, None, True), ("deepseek_v3", {"thinking": True}, "none", False),
    ("kimi_k2", None, None, True), ("kimi_k2", {"thinking": False}, None, False),
    ("glm45", {"enable_thinking": False}, None, False), ("glm47", {}, "high", True),
])
def test_whether_a_request_thinks(name: str, kwargs: dict[str, Any] | None, effort: str | None, on: bool) -> None:
    """Each template family's own switch and default (vLLM's reasoning parsers read the same)."""
    parser = get_reasoning_parser(name)
    assert parser.thinks(kwargs, effort) is on
    off = parser.for_request(thinking=False)
    assert off is not parser and not off.open_at_start and parser.for_request(thinking=True) is parser


def test_a_call_the_model_opens_without_closing_its_thinking_is_read_for_every_family() -> None:
    """The one rule: ``</think>`` decides; a family's trigger inside a block that never closes ends it
    (the call is kept); a trigger inside a block that closes was only drafted (thinking)."""
    from tool_parsers import FAMILIES

    for family in FAMILIES.values():
        if not family.reasoning:
            continue
        parser = get_reasoning_parser(family.reasoning, tool_start=(family.format.trigger,))
        call = family.format.trigger + "..."
        opened = "" if parser.starts_open else parser.start  # (gpt-oss: the model opens its analysis itself)
        assert parser.split(opened + "plan " + call, final=True) == ("plan ", call), family.name
        assert parser.split(opened + "plan " + call + parser.end + "answer", final=True) == ("plan " + call, "answer")
        assert parser.split(opened + "plan " + call[:3], final=False)[1] == "", family.name  # held back, not content


@pytest.mark.parametrize("name", REASONING_PARSERS)
@pytest.mark.parametrize("thinking", [True, False])
def test_split_at_settles_only_what_every_continuation_keeps(name: str, thinking: bool) -> None:
    """``split_at``'s settled point: all reasoning so far is kept by every longer text, and
    splitting on from there (inside the block) gives the rest; markers split anywhere."""
    import random

    parser = get_reasoning_parser(name, thinking=thinking, tool_start=("<tool_call>",))
    start, end = parser.start, parser.end
    pieces = [" ", "\n", "a", "thought ", start[:1], start, end, end[:2], end[2:], "<tool_call>", "<tool", "x"]
    rng = random.Random(f"split-at-{name}-{thinking}")
    settled_points = 0
    for _ in range(120):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 9)))
        for k in range(1, len(text) + 1):
            reasoning, rest, pos = parser.split_at(text[:k], final=False)
            if pos is None:
                continue
            assert rest == ""
            settled_points += 1
            for m in range(k, len(text) + 1):
                for final in (False, True) if m == len(text) else (False,):
                    whole = parser.split(text[:m], final=final)
                    more, after, _ = parser.split_at(text[pos:m], final=final, inside=True)
                    assert whole == (reasoning + more, after), (text[:m], pos)
    assert settled_points > 50


@pytest.mark.parametrize("name", REASONING_PARSERS)
def test_every_split_ends_whatever_the_markers_stand(name: str) -> None:
    """Any text ends its split: the markers alone, twice, out of order or inside one another, at
    every prefix, thinking or not, inside a block or not (a hang there would hang the server)."""
    tool = "<tool_call>"
    with ends_within(20, f"{name}: a split"):
        for thinking in (True, False):
            p = get_reasoning_parser(name, thinking=thinking, tool_start=(tool,))
            markers = [m for m in (p.start, p.end, tool) if m]
            texts = [f"{p.start}why{p.end}answer"]
            for m in markers:
                texts += [f"hello {m} tail", m + m, f"a{m}b{m}c", f"{p.end}{m}{p.start}"]
            for text in texts:
                for end in range(len(text) + 1):
                    for final in (False, True):
                        for inside in (False, True):
                            p.split_at(text[:end], final=final, inside=inside)
