"""CPU cost per token of the streamed parse (MessageStream), by output length.

Feeds synthetic token streams through :class:`server.messages.message_stream.MessageStream`
the way the chat service does (``_new_stream``: the tool parser only when the request has
tools, the repeat guard on by default; ``feed`` per engine chunk, then ``finish``) and prints
CPU microseconds per token at each output length. Flat rows mean amortised O(1) work per
token; rising rows mean each token re-reads the text so far.

    python -m bench.parse_cost                      # this tree
    python -m bench.parse_cost --before HEAD~3      # also a commit's parsers, side by side

``--before REV`` extracts that commit's ``tool_parsers``, ``reasoning_parsers`` and (before it
moved into ``tool_parsers``) ``server/chat/message_stream.py`` into a temporary directory and
runs the same workloads on them in a subprocess (``--src DIR`` runs on any such directory).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["WORKLOADS", "tokens_of", "measure", "main"]

ROOT = Path(__file__).resolve().parent.parent
LENGTHS = (128, 1024, 4096)
_TOKEN = re.compile(r" ?[A-Za-z]+| ?[0-9]+|\\.|\s+|.", re.S)
_WORDS = ("the model writes a long answer with code and prose so the parser sees many tokens "
          "def f(x): return x * 2 # comment é 東 \"quoted\" path/to/file.py {braces} [brackets]").split(" ")


def _prose(n_tokens: int, *, escaped: bool = False) -> list[str]:
    """``n_tokens`` BPE-like tokens of text (inside a JSON string when ``escaped``)."""
    out: list[str] = []
    i = 0
    while len(out) < n_tokens:
        word = _WORDS[i % len(_WORDS)]
        i += 1
        if i % 11 == 0:
            out.append("\\n" if escaped else "\n")
            continue
        if escaped:
            word = json.dumps(word)[1:-1]
        out.extend(tokens_of(" " + word))
    return out[:n_tokens]


def tokens_of(text: str) -> list[str]:
    """Split text roughly as a BPE tokenizer would (markers fall into several tokens)."""
    return _TOKEN.findall(text)


def _wrap(head: str, body: list[str], tail: str, n: int) -> list[str]:
    h, t = tokens_of(head), tokens_of(tail)
    return h + body[: max(1, n - len(h) - len(t))] + t


def _content(n: int) -> list[str]:
    return _prose(n)


def _hermes_long_arg(n: int) -> list[str]:
    return _wrap('<tool_call>\n{"name": "write_file", "arguments": {"path": "a.py", "content": "',
                 _prose(n, escaped=True), '"}}\n</tool_call>', n)


def _hermes_many_keys(n: int) -> list[str]:
    items = []
    k = 0
    while len(items) < n:
        items.extend(tokens_of(f'{", " if k else ""}{{"id": {k}, "tag": "t{k % 7}", "ok": true}}'))
        k += 1
    return _wrap('<tool_call>\n{"name": "save", "arguments": {"rows": [', items, "]}}\n</tool_call>", n)


def _hermes_short_calls(n: int) -> list[str]:
    """Call after call with short arguments: the call's start (marker, name) is most of the text."""
    out: list[str] = []
    k = 0
    while len(out) < n:
        out.extend(tokens_of(f'<tool_call>\n{{"name": "save_user_record", "arguments": {{"id": {k}}}}}\n</tool_call>\n'))
        k += 1
    return out[:n]


def _reasoning_then_content(n: int) -> list[str]:
    half = n // 2
    return tokens_of("<think>") + _prose(half) + tokens_of("</think>\n\n") + _prose(n - half)


def _llama3_json(n: int) -> list[str]:
    return _wrap('<|python_tag|>{"name": "write_file", "parameters": {"path": "a.py", "content": "',
                 _prose(n, escaped=True), '"}}', n)


def _harmony_final(n: int) -> list[str]:
    return _wrap("<|channel|>final<|message|>", _prose(n), "<|return|>", n)


def _harmony_analysis_then_final(n: int) -> list[str]:
    half = n // 2
    return (tokens_of("<|channel|>analysis<|message|>") + _prose(half)
            + tokens_of("<|end|><|start|>assistant<|channel|>final<|message|>") + _prose(n - half) + tokens_of("<|return|>"))


def _mistral(n: int) -> list[str]:
    return _wrap('[TOOL_CALLS] [{"name": "write_file", "arguments": {"path": "a.py", "content": "',
                 _prose(n, escaped=True), '"}}]', n)


# name -> (tool parser or None: the request has no tools, reasoning parser or None, tokens)
WORKLOADS: dict[str, tuple[str | None, str | None, Callable[[int], list[str]]]] = {
    "content (no tools)": (None, None, _content),
    "content (tools: hermes)": ("hermes", None, _content),
    "content (tools: llama3_json)": ("llama3_json", None, _content),
    "content (tools: pythonic)": ("pythonic", None, _content),
    "content (tools: kimi_k3)": ("kimi_k3", None, _content),
    "content (tools: gpt_oss, final message)": ("gpt_oss", None, _harmony_final),
    "analysis then final (gpt_oss)": ("gpt_oss", "openai_gptoss", _harmony_analysis_then_final),
    "hermes long string arg": ("hermes", None, _hermes_long_arg),
    "hermes many keys": ("hermes", None, _hermes_many_keys),
    "hermes short calls": ("hermes", None, _hermes_short_calls),
    "reasoning then content (qwen3+hermes)": ("hermes", "qwen3", _reasoning_then_content),
    "llama3_json long arg": ("llama3_json", None, _llama3_json),
    "mistral long arg": ("mistral", None, _mistral),
}
TOOL_NAMES = ("write_file", "save", "save_user_record")


def measure(tool: str | None, reasoning: str | None, tokens: list[str], *, repeats: int) -> tuple[float, int]:
    """Best-of-``repeats`` CPU microseconds per token, and the number of deltas produced."""
    from reasoning_parsers import get_reasoning_parser
    from tool_parsers import get_tool_parser
    try:
        from server.messages.message_stream import MessageStream
    except ImportError:  # a revision from before it moved (--before)
        from server.chat.message_stream import MessageStream  # type: ignore[no-redef]

    best = float("inf")
    deltas = 0
    for _ in range(repeats):
        stream = MessageStream(  # as server.plan.run._new_stream builds it
            tool_parser=get_tool_parser(tool) if tool else None,
            reasoning_parser=get_reasoning_parser(reasoning) if reasoning else None,
            tool_names=TOOL_NAMES if tool else None,
            streaming=True,
            guard_repeats=True,
        )
        deltas = 0
        start = time.process_time()
        for token in tokens:
            if stream.feed(token) is not None:
                deltas += 1
        if stream.finish() is not None:
            deltas += 1
        stream.final_message()
        best = min(best, time.process_time() - start)
    return best * 1e6 / len(tokens), deltas


def _run(repeats: int) -> dict[str, dict[int, float]]:
    table: dict[str, dict[int, float]] = {}
    for name, (tool, reasoning, make) in WORKLOADS.items():
        table[name] = {}
        for n in LENGTHS:
            tokens = make(n)
            # fewer repeats for long streams: the old code is quadratic
            table[name][n] = measure(tool, reasoning, tokens, repeats=max(2, repeats * 128 // n))[0]
    return table


def _extract(rev: str, into: Path) -> None:
    """That revision's parsers and the server package around MessageStream (which moved over
    time), so the stream and its parsers are both the revision's."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "tool_parsers", "reasoning_parsers", "server"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def _table_from(src: Path, repeats: int) -> dict[str, dict[int, float]]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-m", "bench.parse_cost", "--src", str(src), "--json",
                          "--repeats", str(repeats)], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout
    return {k: {int(n): v for n, v in row.items()} for k, row in json.loads(out).items()}


def _print(after: dict[str, dict[int, float]], before: dict[str, dict[int, float]] | None, label: str) -> None:
    cols = [f"{n} tok" for n in LENGTHS]
    if before is None:
        print(f"{'workload (CPU µs/token)':40}" + "".join(f"{c:>10}" for c in cols) + f"{'4096/128':>10}")
        for name, row in after.items():
            print(f"{name:40}" + "".join(f"{row[n]:10.1f}" for n in LENGTHS) + f"{row[4096] / row[128]:10.2f}")
        return
    head = "".join(f"{'before ' + c:>16}" for c in cols) + "".join(f"{'after ' + c:>15}" for c in cols)
    print(f"before = {label}; CPU µs per token (best of several runs)")
    print(f"{'workload':40}" + head + f"{'x@4096':>9}")
    for name, row in after.items():
        old = before.get(name, {})
        print(f"{name:40}" + "".join(f"{old.get(n, float('nan')):16.1f}" for n in LENGTHS)
              + "".join(f"{row[n]:15.1f}" for n in LENGTHS)
              + f"{old.get(4096, float('nan')) / row[4096]:9.1f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", metavar="REV", help="also measure this git revision's parsers")
    ap.add_argument("--src", type=Path, help="import the parsers from this directory (used by --before)")
    ap.add_argument("--repeats", type=int, default=5, help="runs per 128-token cell (fewer for longer)")
    ap.add_argument("--rounds", type=int, default=3, help="with --before: alternating rounds of old and new")
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    args = ap.parse_args(argv)
    if args.src is not None:
        sys.path.insert(0, str(args.src.resolve()))
        import server
        import tool_parsers

        for module in (tool_parsers, server):
            if not Path(module.__file__ or "").resolve().is_relative_to(args.src.resolve()):
                raise SystemExit(f"--src: imported {module.__file__}, not the copy in {args.src}")
    after = _run(args.repeats)
    if args.json:
        print(json.dumps(after))
        return
    before = None
    if args.before:
        # Old and new alternate, round by round, each in its own process; the best of the
        # rounds is kept, so load from other processes on a shared machine hits both alike.
        with tempfile.TemporaryDirectory() as tmp:
            _extract(args.before, Path(tmp))
            for _ in range(args.rounds):
                before = _best(before, _table_from(Path(tmp), args.repeats))
                after = _best(after, _table_from(ROOT, args.repeats))
    _print(after, before, args.before or "")


def _best(a: dict[str, dict[int, float]] | None, b: dict[str, dict[int, float]]) -> dict[str, dict[int, float]]:
    if a is None:
        return b
    return {name: {n: min(a[name][n], b[name][n]) for n in LENGTHS} for name in b}


if __name__ == "__main__":
    main()
