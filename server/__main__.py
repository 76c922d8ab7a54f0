"""Command line: ``gramserve serve | prepare-model | check-schema | parse``."""
from __future__ import annotations

import sys

__all__ = ["main"]

USAGE = """usage: gramserve COMMAND [options]

commands:
  serve           serve a model with an OpenAI-compatible API (see: gramserve serve --help)
  prepare-model   convert the embedded SmolLM2 GGUF into a cached Hugging Face folder
  check-schema    report how a JSON Schema (or tools list) would be enforced: gramserve check-schema FILE
  parse           replay a model's raw output offline: the message or deltas the server makes of it
                  (see: gramserve parse --help)
"""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    cmd, rest = args[0], args[1:]
    if cmd == "serve":
        from server.config import settings_from_args
        from server.runner import serve

        return serve(settings_from_args(rest))
    if cmd == "prepare-model":
        from server.default_model import ensure_default_model

        print(ensure_default_model(progress=True))
        return 0
    if cmd == "check-schema":
        from server.structured.schema_cli import check_schema_main

        return check_schema_main(rest)
    if cmd == "parse":  # no engine, no model: only the parsers are imported
        from tool_parsers.replay_cli import main as parse_main

        return parse_main(rest)
    print(f"unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
