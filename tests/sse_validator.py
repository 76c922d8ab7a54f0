"""An independent checker of OpenAI chat-completion SSE streams.

Written from the recorded OpenAI API streams in ``shared/testdata/openai_sse``: it
checks the framing (``data: `` events, ``[DONE]`` last), one id for every chunk, the
role in each choice's first delta, the tool-call delta rules, one finish chunk per
choice, and the usage chunk with ``choices: []``. It returns the reconstructed message
per choice so a test can compare it with the non-streamed response.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["StreamProblem", "Reconstructed", "validate_sse"]


class StreamProblem(AssertionError):
    pass


@dataclass
class Reconstructed:
    id: str = ""
    model: str = ""
    content: dict[int, str] = field(default_factory=dict)
    reasoning: dict[int, str] = field(default_factory=dict)
    tool_calls: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)
    finish_reason: dict[int, str] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    chunks: int = 0


def _events(raw: str) -> list[str]:
    if not raw.endswith("\n\n"):
        raise StreamProblem("stream must end with a blank line after the last event")
    events = []
    for block in raw.split("\n\n")[:-1]:
        lines = [ln for ln in block.split("\n") if ln and not ln.startswith(":")]
        if not lines:
            continue
        for ln in lines:
            if not ln.startswith("data: "):
                raise StreamProblem(f"unexpected SSE line: {ln[:80]!r}")
        events.append("\n".join(ln[6:] for ln in lines))
    return events


def validate_sse(raw: str, *, expect_usage: bool | None = None, n: int | None = None) -> Reconstructed:
    events = _events(raw)
    if not events or events[-1] != "[DONE]":
        raise StreamProblem("stream must end with 'data: [DONE]'")
    if "[DONE]" in events[:-1]:
        raise StreamProblem("'[DONE]' must be the last event")
    r = Reconstructed()
    seen_role: set[int] = set()
    usage_seen = False
    for ev in events[:-1]:
        obj = json.loads(ev)
        if "error" in obj:
            raise StreamProblem(f"error event in stream: {obj['error']}")
        r.chunks += 1
        if obj.get("object") != "chat.completion.chunk":
            raise StreamProblem(f"object must be chat.completion.chunk, got {obj.get('object')!r}")
        r.id = r.id or obj["id"]
        if obj["id"] != r.id:
            raise StreamProblem("every chunk must carry the same id")
        r.model = r.model or obj["model"]
        if usage_seen:
            raise StreamProblem("the usage chunk must be the last chunk before [DONE]")
        if obj.get("usage") is not None:
            if obj["choices"] != []:
                raise StreamProblem("the usage chunk must have choices: []")
            u = obj["usage"]
            if u["total_tokens"] != u["prompt_tokens"] + u["completion_tokens"]:
                raise StreamProblem("usage.total_tokens must equal prompt + completion")
            r.usage = u
            usage_seen = True
            continue
        if not obj["choices"]:
            raise StreamProblem("a chunk without usage must have at least one choice")
        for ch in obj["choices"]:
            i = ch["index"]
            d = ch.get("delta") or {}
            if i in r.finish_reason:
                raise StreamProblem(f"choice {i} got a chunk after its finish_reason")
            if i not in seen_role:
                if d.get("role") != "assistant":
                    raise StreamProblem(f"choice {i}'s first delta must carry role 'assistant'")
                seen_role.add(i)
            elif "role" in d:
                raise StreamProblem(f"choice {i}: role must only be in the first delta")
            if d.get("content"):
                r.content[i] = r.content.get(i, "") + d["content"]
            for key in ("reasoning_content", "reasoning"):
                if d.get(key):
                    r.reasoning[i] = r.reasoning.get(i, "") + d[key]
            calls = r.tool_calls.setdefault(i, {})
            for tc in d.get("tool_calls") or []:
                k = tc["index"]
                fn = tc.get("function") or {}
                if k not in calls:
                    if calls and k < max(calls):
                        raise StreamProblem("tool call indexes must only grow")
                    if not (tc.get("id") and tc.get("type") == "function" and fn.get("name")):
                        raise StreamProblem("a tool call's first delta must carry id, type and function.name")
                    if fn.get("arguments") != "":
                        raise StreamProblem("a tool call's first delta must carry arguments ''")
                    calls[k] = {"id": tc["id"], "name": fn["name"], "arguments": ""}
                else:
                    if tc.get("id") or fn.get("name"):
                        raise StreamProblem("later tool-call deltas must carry only argument fragments")
                    if k != max(calls):
                        raise StreamProblem("argument fragments must go to the latest tool call")
                    calls[k]["arguments"] += fn.get("arguments", "")
            if ch.get("finish_reason"):
                r.finish_reason[i] = ch["finish_reason"]
    if n is not None and set(r.finish_reason) != set(range(n)):
        raise StreamProblem(f"expected a finish_reason for each of {n} choices, got {sorted(r.finish_reason)}")
    for i, reason in r.finish_reason.items():
        has_calls = bool(r.tool_calls.get(i))
        if (reason == "tool_calls") != has_calls and reason != "length":
            raise StreamProblem(f"choice {i}: finish_reason {reason!r} but tool calls present={has_calls}")
    if expect_usage is True and r.usage is None:
        raise StreamProblem("include_usage was requested but no usage chunk was sent")
    if expect_usage is False and r.usage is not None:
        raise StreamProblem("usage chunk sent without include_usage")
    return r
