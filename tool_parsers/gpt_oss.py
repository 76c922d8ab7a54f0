"""gpt-oss tool calls and channels: OpenAI's Harmony format (vLLM's ``openai``).

The model writes messages, each a header and a body::

    <|channel|>analysis<|message|>The user wants the weather.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>

or ``<|channel|>final<|message|>It is sunny.<|return|>``. The prompt ends with ``<|start|>assistant``,
so the first message starts at its header. The recipient (``to=functions.NAME``) may also sit
before ``<|channel|>``; ``<|constrain|>json`` / `` json`` names the body's type. Which part of the
OpenAI message a body is comes from its header, as in vLLM's harmony parser:

* ``to=functions.NAME``: a tool call, the body its JSON arguments;
* ``analysis`` without a recipient: reasoning (:attr:`ParsedTools.reasoning`);
* ``final``, or ``commentary`` without a recipient (a preamble): content;
* any other recipient (built-in tools, ``browser.search``, ``python``): not returned, noted.

Channels are the message itself, not only tool calls, so the family parses every request
(:attr:`HarmonyToolParser.channels`). The stop tokens ``<|call|>`` / ``<|return|>`` usually end
the engine's text unseen: a body the text ends in is complete at the final parse. The grammar
(:class:`HarmonyCallFormat`) follows vLLM's harmony structural tag and XGrammar's ``harmony``
built-in: analysis and preamble messages, then calls or the final message.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from ._calls import named_arguments
from ._content import without
from ._scan import JsonError, partial_marker_start, skip_ws
from .base import CallFormat, Checkpoint, JsonObject, JsonValue, ModelFamily, ParsedTools, ToolCallPart, ToolParser

__all__ = ["HarmonyToolParser", "HarmonyCallFormat", "FAMILIES", "MARKERS"]

START, ASSISTANT, CHANNEL, MESSAGE = "<|start|>", "<|start|>assistant", "<|channel|>", "<|message|>"
END, CALL, RETURN, CONSTRAIN = "<|end|>", "<|call|>", "<|return|>", "<|constrain|>"
_ENDS = (END, CALL, RETURN)
MARKERS = (START, CHANNEL, MESSAGE, END, CALL, RETURN, CONSTRAIN)  # Harmony's special tokens the parser reads
_FUNCTIONS = "functions."
_HEADER_STARTS = (CHANNEL, " to=", "to=", START)
_RECIPIENT = re.compile(r"(?:^|\s)to=([^\s<]+)")
_CHANNEL_NAME = re.compile(re.escape(CHANNEL) + r"(\w+)")
_BAD_HEADER = re.compile(r"<\|(?!channel\|>|constrain\|>)|\n")  # what never sits inside a header
_REASONING, _CONTENT, _SKIP = "analysis", "content", "skip"  # resume words: inside a body of this kind
_OUTSIDE = "outside"  # resume word: in text outside any message (content up to a header)


@dataclass(frozen=True)
class HarmonyCallFormat(CallFormat):
    """The pieces (one call, as the model writes it) and the grammar of whole messages."""

    def structural_tag(self, tools: Sequence[tuple[str, JsonValue]], *, mode: Literal["auto", "required"],
                       parallel: bool, arguments: Callable[[JsonValue], JsonObject]) -> JsonObject | None:
        """Analysis or preamble messages, if any, then one call (more with ``parallel``) or, under
        auto, the final message. A call's end is the stop token ``<|call|>`` or nothing (the
        engine stops at it)."""
        calls: list[JsonValue] = [
            {"type": "tag", "begin": begin.format(name=name), "content": arguments(schema), "end": [CALL, ""]}
            for name, schema in tools for begin in _CALL_BEGINS]
        call: JsonValue = calls[0] if len(calls) == 1 else {"type": "or", "elements": calls}
        if parallel:
            call = {"type": "sequence", "elements": [call, {"type": "star", "content": {
                "type": "sequence", "elements": [{"type": "const_string", "value": ASSISTANT}, call]}}]}
        if mode == "auto":
            call = {"type": "or", "elements": [call, _final({"type": "any_text"})]}
        return _after_messages(call)

    def answer(self, content: JsonObject) -> JsonObject | None:
        """A constrained answer (``response_format``) is the final message's body."""
        return _after_messages(_final(content))


def _final(content: JsonValue) -> JsonObject:
    """The final message holding ``content`` (vLLM's harmony tag: with or without a json type)."""
    finals: list[JsonValue] = [{"type": "tag", "begin": CHANNEL + "final" + constrain + MESSAGE, "content": content,
                                "end": [END, RETURN, ""]} for constrain in ("", " " + CONSTRAIN + "json", " json")]
    return {"type": "or", "elements": finals}


def _after_messages(last: JsonValue) -> JsonObject:
    """``last`` after any analysis or preamble messages. A leading ``<|start|>assistant`` is allowed,
    so that the reasoning parser's block (the first analysis message) may come before."""
    def message(channel: str) -> JsonValue:
        return {"type": "tag", "begin": CHANNEL + channel + MESSAGE, "content": {"type": "any_text"}, "end": [END]}

    before: JsonValue = {"type": "star", "content": {"type": "sequence", "elements": [
        {"type": "or", "elements": [message("analysis"), message("commentary")]},
        {"type": "const_string", "value": ASSISTANT}]}}
    return {"type": "sequence", "elements": [
        {"type": "optional", "content": {"type": "const_string", "value": ASSISTANT}}, before, last]}


# How gpt-oss writes a function call's header (vLLM's harmony tag; the first is what it writes most)
_CALL_BEGINS = tuple(
    pattern.format(channel=CHANNEL + channel, constrain=constrain, name="{name}")
    for pattern in ("{channel} to=functions.{name}{constrain}" + MESSAGE, " to=functions.{name}{channel}{constrain}" + MESSAGE)
    for channel in ("commentary", "analysis")
    for constrain in (" " + CONSTRAIN + "json", " json")
)


class HarmonyToolParser(ToolParser):
    """Harmony messages: analysis as reasoning, final and preambles as content, calls to
    ``functions.*`` as tool calls. Checkpoints at each message's end and inside long bodies."""

    name: ClassVar[str] = "gpt_oss"
    start: ClassVar[str] = CHANNEL
    end: ClassVar[str] = CALL
    format: ClassVar[CallFormat] = HarmonyCallFormat(
        trigger=CHANNEL + "commentary to=", section_begin="", call_begin=CHANNEL + "commentary to=" + _FUNCTIONS,
        name_end=" " + CONSTRAIN + "json" + MESSAGE, call_end=CALL, separator=ASSISTANT, section_end="")
    channels: ClassVar[bool] = True  # reasoning and content are channels too: parse every request

    def parse(self, text: str, *, final: bool, resume: str | None = None) -> ParsedTools:
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[ToolCallPart] = []
        errors: list[str] = []
        bad: list[tuple[int, int | None]] = []
        checkpoint: Checkpoint | None = None
        n = len(text)
        prose = False  # the text ends in content with nothing held back (ParsedTools.prose_end)

        def settled(pos: int, kind: str | None = None) -> Checkpoint:
            return Checkpoint(pos, sum(map(len, content)), len(calls), len(errors), kind,
                              reasoning=sum(map(len, reasoning)))

        def body(pos: int, kind: str) -> tuple[int | None, Checkpoint | None]:
            """A body from ``pos`` to its end marker: (where the next message starts, a checkpoint)."""
            into = reasoning if kind == _REASONING else content if kind == _CONTENT else None
            nonlocal prose
            at, marker = _first_end(text, pos)
            if at < 0:
                stop = n if final else partial_marker_start(text, _ENDS, pos)
                if into is not None:
                    into.append(text[pos:stop])
                prose = kind == _CONTENT and stop == n
                return None, settled(stop, kind) if stop > pos and not final else None
            if into is not None:
                into.append(text[pos:at])
            return at + len(marker), None

        def outside(p: int) -> int | None:
            """Text outside any message from ``p`` (a model that did not write Harmony): content up
            to the next header (where the next message starts; None: the text ends in it)."""
            nonlocal prose, checkpoint
            q = min((i for i in (text.find(CHANNEL, p), text.find(START, p)) if i >= 0), default=-1)
            stop = q if q >= 0 else n if final else partial_marker_start(text, (CHANNEL, START), p)
            content.append(text[p:stop])
            if q >= 0:
                return q
            prose = stop == n
            if stop > p and not final:  # (what follows the text read so far cannot change it)
                checkpoint = settled(stop, _OUTSIDE)
            return None

        pos = 0
        if resume == _OUTSIDE:
            nxt = outside(0)
            if nxt is None:
                return ParsedTools("".join(content), (), (), checkpoint, (), prose_end=prose)
            pos = nxt
        elif resume in (_REASONING, _CONTENT, _SKIP):
            nxt, cp = body(0, resume)
            checkpoint = cp or (settled(nxt) if nxt is not None else None)
            if nxt is None:
                return ParsedTools("".join(content), (), (), checkpoint, (), reasoning="".join(reasoning),
                                   prose_end=prose)
            pos = nxt
        while True:
            p = skip_ws(text, pos)
            while text.startswith(ASSISTANT, p):
                p = skip_ws(text, p + len(ASSISTANT))
            if not final and p < n and ASSISTANT.startswith(text[p:]):
                break  # a partial <|start|>assistant
            if p >= n:
                break
            if not any(text.startswith(h, p) or (not final and h.startswith(text[p:])) for h in _HEADER_STARTS):
                nxt = outside(p)
                if nxt is None:
                    break
                pos = nxt
                continue
            m = text.find(MESSAGE, p)
            bad_at = _BAD_HEADER.search(text, p + len(START) * text.startswith(START, p), m if m >= 0 else n)
            if bad_at is not None and not (m < 0 and not final and _partial_tag(text[bad_at.start():])):
                # not a header after all: its text is content, up to the next message
                q = text.find(START, bad_at.start())
                stop = q if q >= 0 else n if final else partial_marker_start(text, (START,), bad_at.start())
                errors.append(f"{self.name}: malformed message header at offset {p}; kept as content")
                content.append(text[p:stop])
                bad.append((p, stop if q >= 0 or final else None))
                if q < 0:
                    break
                pos = q
                continue
            if m < 0:
                if final and _FUNCTIONS in text[p:]:
                    errors.append(f"{self.name}: the text ends inside a tool call's header at offset {p}")
                break  # the header is still being written (or cut: nothing of it is a message)
            header, b = text[p:m], m + len(MESSAGE)
            recipient = _RECIPIENT.search(header)
            channel = _CHANNEL_NAME.search(header)
            checkpoint = settled(p) if p > 0 else checkpoint
            if recipient is not None and recipient.group(1).startswith(_FUNCTIONS):
                name = recipient.group(1)[len(_FUNCTIONS):]
                at, marker = _first_end(text, b)
                if (at >= 0 or final) and not text[b:at if at >= 0 else n].strip():
                    calls.append(ToolCallPart(name, "{}", True))  # a call without a body takes no arguments
                    if at < 0:
                        break
                    pos = at + len(marker)
                    continue
                try:
                    call, end = named_arguments(text, name, skip_ws(text, b), final=final)
                except JsonError as exc:
                    errors.append(f"{self.name}: malformed tool call at offset {p} ({exc}); kept as content")
                    at, marker = _first_end(text, b)
                    stop = at if at >= 0 else n if final else partial_marker_start(text, _ENDS, b)
                    content.append(text[b:stop])
                    bad.append((p, at + len(marker) if at >= 0 else n if final else None))
                    if at < 0:
                        break
                    pos = at + len(marker)
                    continue
                calls.append(call)
                if end is None:
                    break
                r = skip_ws(text, end)
                closing = next((e for e in _ENDS if text.startswith(e, r)), None)
                if closing is not None:
                    pos = r + len(closing)
                    continue
                if r >= n and final:
                    break  # the stop token ended the text: the call stands
                if r >= n or (not final and any(e.startswith(text[r:]) for e in _ENDS)):
                    break  # its end marker is still to come
                errors.append(f"{self.name}: text after a tool call's arguments at offset {r}; kept as content")
                q = text.find(START, r)
                content.append(text[r:q if q >= 0 else n])
                bad.append((r, q if q >= 0 else n if final else None))
                if q < 0:
                    break
                pos = q
                continue
            if recipient is not None:
                errors.append(f"{self.name}: a call to {recipient.group(1)!r} (not a function tool) is not returned")
                kind = _SKIP
            else:
                kind = _REASONING if channel is not None and channel.group(1) == "analysis" else _CONTENT
            nxt, cp = body(b, kind)
            if nxt is None:
                checkpoint = cp or checkpoint
                break
            pos = nxt
            checkpoint = settled(pos)
        return ParsedTools("".join(content), tuple(calls), tuple(errors), checkpoint, tuple(bad),
                           reasoning="".join(reasoning), prose_end=prose)

    def prose_inert(self) -> re.Pattern[str] | None:
        """In a final message's body (or text outside any message) only a marker ends the content,
        and every Harmony marker begins with ``<``."""
        return without(START[0])


def _first_end(text: str, pos: int) -> tuple[int, str]:
    """The first end marker at or after ``pos`` and which it is ((-1, "") when none)."""
    found = [(i, e) for e in _ENDS if (i := text.find(e, pos)) >= 0]
    return min(found) if found else (-1, "")


def _partial_tag(tail: str) -> bool:
    """Whether ``tail`` (the end of the text) may still become a tag a header holds or ends with."""
    return any(tag.startswith(tail) for tag in (MESSAGE, CHANNEL, CONSTRAIN))


def _detect(template: str) -> bool:
    return "<|channel|>" in template and "<|message|>" in template


_GPT_OSS_WRITES = ("Harmony messages: `<|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>commentary"
                   " to=functions.f <|constrain|>json<|message|>{...}<|call|>` (`to=` may come before "
                   "`<|channel|>`); analysis → `reasoning_content` (`--reasoning-parser openai_gptoss`, picked by "
                   "auto), `final` and recipient-less `commentary` → `content`; calls to built-in tools (browser, "
                   "python) are not returned; a `response_format` answer is the final message's body")

FAMILIES = (
    ModelFamily(name="gpt_oss", reasoning="openai_gptoss", parser=HarmonyToolParser(), detect=_detect, detect_order=3,
                models="gpt-oss-20b / 120b",
                writes=_GPT_OSS_WRITES,
                detects="`<|channel|>` with `<|message|>`"),
    # vLLM's name (--tool-call-parser openai)
    ModelFamily(name="openai", reasoning="openai_gptoss", parser=HarmonyToolParser(name="openai"), detect=lambda t: False,
                detect_order=4,
                doc_row="gpt_oss"),
)
