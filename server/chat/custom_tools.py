"""Custom (free-form input) tools: their calls, made as ``{"input": "..."}`` function calls,
answered in the custom shape, whole or streamed as the input grows.

The model calls a custom tool like any function tool (one string argument ``input``, its
regex enforced by the grammar); clients see ``type: "custom"`` calls carrying the decoded
``input`` text, as OpenAI returns them.
"""
from __future__ import annotations

import json
import re

__all__ = ["custom_input", "InputStream"]

_OPEN = re.compile(r'\s*\{\s*"input"\s*:\s*"')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def custom_input(arguments: str) -> str:
    """The ``input`` of a finished call (the arguments text when it is not the expected object)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value["input"] if isinstance(value, dict) and isinstance(value.get("input"), str) else arguments


def _decode_prefix(body: str) -> str:
    """The text of a JSON string body cut anywhere: every complete character up to the cut."""
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == '"':
            break
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(body):
            break
        esc = body[i + 1]
        if esc in _ESCAPES:
            out.append(_ESCAPES[esc])
            i += 2
        elif esc == "u" and i + 6 <= len(body):
            code = int(body[i + 2:i + 6], 16)
            if 0xD800 <= code < 0xDC00:  # a surrogate pair: wait for its second half
                if i + 12 > len(body):
                    break
                low = int(body[i + 8:i + 12], 16)
                out.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
                i += 12
            else:
                out.append(chr(code))
                i += 6
        else:
            break
    return "".join(out)


class InputStream:
    """Per custom call: the arguments text so far, and how much of its input was sent."""

    def __init__(self) -> None:
        self.arguments = ""
        self.sent = 0

    def feed(self, fragment: str) -> str:
        """The new input text that ``fragment`` of the arguments completes."""
        self.arguments += fragment
        m = _OPEN.match(self.arguments)
        if m is None:
            return ""
        text = _decode_prefix(self.arguments[m.end():])
        new, self.sent = text[self.sent:], max(self.sent, len(text))
        return new
