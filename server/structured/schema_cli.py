"""``gramserve check-schema FILE``: the diagnostics report offline (no server, no model).

Builds the spec a request with the file's body builds on a default server (default Settings,
``--tool-call-parser`` for a tools list, no reasoning parser), then compiles it against an empty
vocabulary, which checks the grammar itself; token-level compile time on a real tokenizer is
what the server's endpoint reports.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["check_schema_main"]


def check_schema_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="gramserve check-schema")
    p.add_argument("file", help="JSON file: a JSON Schema, {\"schema\": ...}, or a tools list ('-' for stdin)")
    p.add_argument("--json", action="store_true", help="print the full JSON report")
    p.add_argument("--tool-call-parser", default="hermes",
                   help="the tool-call family whose grammar a tools list is checked in (default: hermes)")
    ns = p.parse_args(argv)
    import xgrammar as xgr

    from server.structured.grammar_cache import GrammarCache
    from server.structured.schema_check import check_schema_report, offline_capabilities

    text = sys.stdin.read() if ns.file == "-" else Path(ns.file).read_text()
    cache = GrammarCache(xgr.TokenizerInfo([]), disable_any_whitespace=True)
    try:
        report = check_schema_report(json.loads(text), cache=cache, caps=offline_capabilities(ns.tool_call_parser))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if ns.json:
        print(json.dumps(report, indent=2))
    else:
        for item in report["items"]:
            compiles = "compiles, not strict" if item["compiles"] else "does not compile"
            status = "ok under strict" if item["strict_ok"] else compiles
            print(f"{item['name']}: {status}")
            if item["error"]:
                print(f"  error: {item['error']}")
            for problem in item["problems"]:
                print(f"  - {problem}")
            levels: dict[str, int] = {}
            for k in item["keywords"]:
                levels[k["level"]] = levels.get(k["level"], 0) + 1
            print("  keywords: " + ", ".join(f"{n} {lvl}" for lvl, n in sorted(levels.items())))
    return 0 if report["ok"] else 1
