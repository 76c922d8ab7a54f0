"""``gramserve parse``: replay a model's raw output offline (see :mod:`server.messages.replay`).

Reads the text from FILE or stdin and prints the assistant message as JSON, or with
``--stream`` the ``delta`` objects one JSON line each. ``--jsonl`` reads one JSON object a
line (``{"model_output": ..., "tools": [...], ...}``, fields named as in a request) and
writes one result a line. Notes (malformed calls, dropped names, repeats) and the finish
reason go to stderr. No engine, no model: it imports only the parsers.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO, TypeGuard, cast

from server.json_types import JsonArray, JsonObject, JsonValue
from server.messages.openai_message import REASONING_FIELDS
from server.messages.replay import DEFAULT_CHUNK, Replay, parse_output, stream_output
from tool_parsers import FAMILIES

__all__ = ["main", "build_parser"]

_NONE = "none"
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode  # as the server writes JSON


class UsageError(Exception):
    """Bad input: a message for the user, exit status 2, no traceback."""


def build_parser() -> argparse.ArgumentParser:
    from reasoning_parsers import REASONING_PARSERS

    p = argparse.ArgumentParser(
        prog="gramserve parse",
        description="Print what gramserve makes of a model's raw output: the OpenAI assistant message "
                    "(or, with --stream, the delta objects /v1/chat/completions would send).")
    p.add_argument("file", nargs="?", default="-", metavar="FILE", help="the model's output (default: stdin, '-')")
    p.add_argument("--tool-call-parser", required=True, choices=[*sorted(FAMILIES), _NONE], metavar="NAME",
                   help=f"the server's --tool-call-parser: {', '.join([*sorted(FAMILIES), _NONE])}")
    p.add_argument("--reasoning-parser", choices=REASONING_PARSERS, metavar="NAME",
                   help=f"the server's --reasoning-parser: {', '.join(REASONING_PARSERS)} (default: none)")
    p.add_argument("--tools", metavar="FILE", help="the request's tools (a JSON list, or an object with 'tools'); "
                   "calls to other names are dropped as the server drops them (default: keep every name)")
    p.add_argument("--stream", action="store_true", help="print the delta objects, one JSON line each")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--chunk", type=int, default=DEFAULT_CHUNK, metavar="N",
                      help=f"with --stream: characters per engine chunk (default {DEFAULT_CHUNK})")
    size.add_argument("--per-char", action="store_true", help="with --stream: one character per engine chunk")
    p.add_argument("--jsonl", action="store_true",
                   help='read one {"model_output", "tools", ...} object a line, write one result a line')
    p.add_argument("--no-thinking", action="store_true", help="as a request with enable_thinking: false")
    p.add_argument("--reasoning-field", choices=REASONING_FIELDS, default="reasoning_content",
                   help="the server's --reasoning-field (default reasoning_content)")
    p.add_argument("--allow-duplicate-tool-calls", action="store_true", help="the server's flag of that name")
    return p


def main(argv: list[str] | None = None, *, stdin: TextIO | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Run ``gramserve parse``; the exit status (0 ok, 1 some --jsonl lines failed, 2 bad input)."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    args = build_parser().parse_args(argv)
    try:
        if args.chunk < 1:
            raise UsageError(f"--chunk must be at least 1, not {args.chunk}")
        if (args.per_char or args.chunk != DEFAULT_CHUNK) and not args.stream:
            raise UsageError("--chunk and --per-char only apply with --stream")
        tools = _read_tools(args.tools) if args.tools else None
        text = _read(args.file, stdin)
        if args.jsonl:
            return _jsonl(text, args, tools, stdout)
        replay = _replay(text, args, tools=tools)
    except UsageError as exc:
        print(f"gramserve parse: {exc}", file=stderr)
        return 2
    if args.stream:
        for delta in replay.deltas:
            print(_ENCODE(delta), file=stdout)
    else:
        print(json.dumps(replay.message, ensure_ascii=False, indent=2), file=stdout)
    for note in replay.notes:
        print(f"note: {note}", file=stderr)
    print(f"finish_reason: {replay.finish_reason}", file=stderr)
    return 0


def _is_output(value: JsonValue) -> TypeGuard[str | list[str]]:
    """A model output: its text, or the engine's pieces of it."""
    return isinstance(value, str) or isinstance(value, list) and all(isinstance(x, str) for x in value)


def _replay(output: JsonValue, args: argparse.Namespace, *, tools: JsonArray | None,
            line: JsonObject | None = None) -> Replay:
    """One replay; a ``--jsonl`` line may name its own parsers, tools and thinking switches."""
    line = line or {}
    parser = line.get("tool_call_parser", args.tool_call_parser)
    # A line's parser names go to the replay as given: it looks them up (ValueError for an unknown name).
    reasoning = line.get("reasoning_parser", args.reasoning_parser)
    for key, name in (("tool_call_parser", parser), ("reasoning_parser", reasoning)):
        if name is not None and not isinstance(name, str):
            raise UsageError(f"{key} must be a parser's name (a string), not {type(name).__name__}")
    tool_call_parser = None if parser in (None, _NONE) else cast(str, parser)
    reasoning_parser = cast("str | None", reasoning)
    line_tools = line.get("tools", tools)  # checked by the replay (ValueError unless a list of function tools)
    thinking = _thinking(line, default=not args.no_thinking)
    if not _is_output(output):
        raise UsageError("model_output must be a string or a list of strings (the engine's pieces)")
    try:
        if args.stream:
            return stream_output(output, tool_call_parser=tool_call_parser, reasoning_parser=reasoning_parser,
                                 tools=line_tools, chunk=1 if args.per_char else args.chunk, thinking=thinking,
                                 reasoning_field=args.reasoning_field,
                                 allow_duplicate_tool_calls=args.allow_duplicate_tool_calls)
        return parse_output(output, tool_call_parser=tool_call_parser, reasoning_parser=reasoning_parser,
                            tools=line_tools, thinking=thinking, reasoning_field=args.reasoning_field,
                            allow_duplicate_tool_calls=args.allow_duplicate_tool_calls)
    except ValueError as exc:  # an unknown parser name, or tools that are not function tools
        raise UsageError(str(exc)) from None


def _thinking(line: JsonObject, *, default: bool) -> bool:
    """As the server reads a request: ``enable_thinking: false`` or ``reasoning_effort: "none"`` turn it off."""
    kwargs = line.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise UsageError("chat_template_kwargs must be an object")
    if "enable_thinking" not in kwargs and "reasoning_effort" not in line:
        return default
    return kwargs.get("enable_thinking", True) is not False and line.get("reasoning_effort") != "none"


def _jsonl(text: str, args: argparse.Namespace, tools: JsonArray | None, stdout: TextIO) -> int:
    failed = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            try:
                line = json.loads(raw)
            except ValueError as exc:
                raise UsageError(f"not JSON ({exc})") from None
            if not isinstance(line, dict) or "model_output" not in line:
                raise UsageError('each line must be an object with "model_output"')
            result = _replay(line["model_output"], args, tools=tools, line=line).to_json()
            if "id" in line:
                result = {"id": line["id"], **result}
        except UsageError as exc:
            failed += 1
            result = {"line": number, "error": str(exc)}
        print(_ENCODE(result), file=stdout)
    return 1 if failed else 0


def _read(path: str, stdin: TextIO) -> str:
    if path == "-":
        return stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def _read_tools(path: str) -> JsonArray:
    try:
        data = json.loads(_read(path, sys.stdin))
    except ValueError as exc:
        raise UsageError(f"{path} is not JSON: {exc}") from None
    tools = data.get("tools") if isinstance(data, dict) else data
    if not isinstance(tools, list):
        raise UsageError(f"{path} must hold a JSON list of tools, or an object with a 'tools' list")
    return tools
