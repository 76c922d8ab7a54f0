"""server/chat/sse.py: events framed as OpenAI frames them; the per-token fast path."""
from __future__ import annotations

import json

import pytest

from server.chat.sse import DONE, ContentFrames, chunk, sse_event


def test_event_is_compact_json_and_keeps_unicode():
    assert sse_event({"a": "é", "b": [1, 2]}) == 'data: {"a":"é","b":[1,2]}\n\n'.encode()
    assert DONE == b"data: [DONE]\n\n"


@pytest.mark.parametrize("text", ["Hello", "", 'say "hi"\n\\', "é \u2603 \U0001F600", "\u2028\x00\x1f", "</script>"])
@pytest.mark.parametrize("index", [0, 3])
def test_content_frames_are_byte_for_byte_the_general_event(text, index):
    fast = ContentFrames(id="chatcmpl-x", created=123, model='m"odel/é')
    general = sse_event(chunk(id="chatcmpl-x", created=123, model='m"odel/é', choices=[
        {"index": index, "delta": {"content": text}, "logprobs": None, "finish_reason": None}]))
    assert fast.content(index, text) == general
    assert json.loads(general[6:])["choices"][0]["delta"]["content"] == text
    fragment = sse_event(chunk(id="chatcmpl-x", created=123, model='m"odel/é', choices=[
        {"index": index, "delta": {"tool_calls": [{"index": 2, "function": {"arguments": text}}]}, "logprobs": None,
         "finish_reason": None}]))
    assert fast.arguments(index, 2, text) == fragment
