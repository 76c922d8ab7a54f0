"""Tool-call grammars: a family's :class:`~tool_parsers.base.CallFormat` (or its own structural tag)
and the request's tools as one XGrammar structural-tag ``format``, with the few format builders the
rest of ``server/structured/constraints.py`` shares.

Tool-call formats are data owned by the parsers (``tool_parsers.base.CallFormat``): the text of N
calls is section_begin + call(1) + (separator + call(i))* + section_end with call = call_begin +
NAME + name_end + ARGS + call_end; ``trigger`` (a prefix of section_begin + call_begin) starts the
calls under tool_choice "auto".
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from server.structured.errors import ConstraintError

if TYPE_CHECKING:  # pragma: no cover
    from tool_parsers.base import CallFormat

__all__ = ["EMPTY_OBJECT", "JSON_MAX_WHITESPACE", "const", "framed_answer", "json_format", "one_of", "resolve_format",
           "seq", "tool_call_format", "tool_formats"]

# JSON inside structural tags: at most this many whitespace characters in a row (no endless
# whitespace from small models; vLLM's disable_any_whitespace does not reach structural tags).
JSON_MAX_WHITESPACE = 16
# What a tool without parameters takes: exactly {}.
EMPTY_OBJECT = {"type": "object", "properties": {}, "additionalProperties": False}


def tool_formats() -> dict[str, CallFormat]:
    from tool_parsers import TOOL_PARSERS, get_tool_parser

    return {name: get_tool_parser(name).format for name in TOOL_PARSERS}


def resolve_format(tool_format: str | CallFormat | None) -> CallFormat:
    if tool_format is not None and not isinstance(tool_format, str):
        return tool_format  # a CallFormat given directly
    formats = tool_formats()
    if tool_format is None:
        raise ConstraintError(
            "Tool calls cannot be constrained: no tool-call format is known for this model "
            f"(the server needs a tool-call parser: one of {', '.join(sorted(formats))}).",
            "tools",
        )
    if tool_format not in formats:
        raise ConstraintError(
            f"Tool calls cannot be constrained: the tool-call format {tool_format!r} is not one of "
            f"{', '.join(sorted(formats))}.",
            "tools",
        )
    return formats[tool_format]


def const(value: str) -> dict[str, Any]:
    return {"type": "const_string", "value": value}


def seq(*elements: dict[str, Any] | None) -> dict[str, Any]:
    items = [e for e in elements if e is not None and not (e.get("type") == "const_string" and e["value"] == "")]
    return items[0] if len(items) == 1 else {"type": "sequence", "elements": items}


def one_of(elements: list[dict[str, Any]]) -> dict[str, Any]:
    return elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}


def json_format(schema: Any, style: str = "json") -> dict[str, Any]:
    """Arguments per ``schema``; ``style`` is how they are written (XGrammar's JSON or an XML style)."""
    if schema == EMPTY_OBJECT and style == "json":  # parameterless tool: exactly "{}", no whitespace to pad it with
        return const("{}")
    fmt = {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": JSON_MAX_WHITESPACE}
    return fmt if style == "json" else {**fmt, "style": style}


def _calls_only_at_start(fmt: CallFormat) -> bool:
    """Formats whose parser finds calls only at the start of the output (no marker to find
    them later): the family's data says so."""
    return not fmt.calls_follow_text


def tool_call_format(
    fmt: CallFormat, tools: list[tuple[str, Any]], *, mode: Literal["auto", "required"], parallel: bool
) -> dict[str, Any]:
    """The structural-tag ``format`` for calls of ``tools`` ((name, arguments schema) pairs).

    auto: free text, then (once the trigger appears) one or more calls, then nothing; for
    formats read only at the start: the calls, or free text without the trigger.
    required: one or more calls and nothing else. ``parallel`` False: exactly one call at most.
    """
    try:
        own = fmt.structural_tag(tools, mode=mode, parallel=parallel,  # a family that owns its grammar
                                 arguments=lambda schema: json_format(schema, fmt.arguments_style))
    except ConstraintError:
        raise
    except ValueError as exc:  # tools the family's format cannot express (its message says why)
        raise ConstraintError(str(exc), "tools") from None
    if own is not None:
        return own
    heads = fmt.heads([n for n, _ in tools])  # each call's text before its arguments
    calls = [(b, json_format(s, fmt.arguments_style)) for b, (_, s) in zip(heads, tools, strict=True)]
    any_call = one_of([seq(const(b), j, const(fmt.call_end)) for b, j in calls])
    more = {"type": "star", "content": seq(const(fmt.separator), any_call)} if parallel else None
    block = seq(const(fmt.section_begin), any_call, more, const(fmt.section_end))
    if mode == "required":
        return block
    if _calls_only_at_start(fmt):
        # The parser reads calls only at the very start (llama3_json): either the calls, or
        # free text that never contains the trigger (which could otherwise look like a call).
        return {"type": "or", "elements": [block, {"type": "any_text", "excludes": [fmt.trigger]}]}
    # auto: each triggered tag starts with a full first call; its content carries the
    # following calls so that the section closes exactly once and nothing may follow.
    tail = fmt.call_end + fmt.section_end
    if not parallel:
        tags = [{"type": "tag", "begin": fmt.section_begin + b, "content": j, "end": tail} for b, j in calls]
        return {"type": "triggered_tags", "triggers": [fmt.trigger], "tags": tags, "stop_after_first": True}
    if tail:
        next_call = one_of([seq(const(b), j) for b, j in calls])
        more = {"type": "star", "content": seq(const(fmt.call_end + fmt.separator), next_call)}
        tags = [
            {"type": "tag", "begin": fmt.section_begin + b, "content": seq(j, more), "end": tail}
            for b, j in calls
        ]
        return {"type": "triggered_tags", "triggers": [fmt.trigger], "tags": tags, "stop_after_first": True}
    # No closing text at all (mistral v11): first call by trigger, further calls follow it.
    tags = [{"type": "tag", "begin": b, "content": j, "end": ""} for b, j in calls]
    first = {"type": "triggered_tags", "triggers": [fmt.trigger], "tags": tags, "stop_after_first": True}
    return seq(first, {"type": "star", "content": seq(const(fmt.separator), any_call)})


def framed_answer(tool_format: str | CallFormat | None, answer: dict[str, Any]) -> dict[str, Any] | None:
    """``answer`` in the family's frame (``CallFormat.answer``), or None when it has none."""
    if tool_format is None:
        return None
    fmt = tool_formats().get(tool_format) if isinstance(tool_format, str) else tool_format
    return None if fmt is None else fmt.answer(answer)
