"""Command line: ``gramserve serve | prepare-model | check-schema | parse``."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from server.config import Settings

__all__ = ["main", "serve"]

USAGE = """usage: gramserve COMMAND [options]

commands:
  serve           serve a model with an OpenAI-compatible API (see: gramserve serve --help)
  prepare-model   convert the embedded SmolLM2 GGUF into a cached Hugging Face folder
  check-schema    report how a JSON Schema (or tools list) would be enforced: gramserve check-schema FILE
  parse           replay a model's raw output offline: the message or deltas the server makes of it
                  (see: gramserve parse --help)
"""


def serve(settings: Settings) -> int:
    """The process-level choice: one process, or ``--api-server-count`` API processes on one engine."""
    from server.logs import configure_logging

    configure_logging()
    from server.runner import event_loop_factory

    event_loop_factory(settings.event_loop)  # an --event-loop this machine lacks: said before anything starts
    if settings.api_server_count > 1:
        from server.api_servers import serve_api_servers

        return serve_api_servers(settings)
    from server.runner import serve_one_process

    return serve_one_process(settings)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    cmd, rest = args[0], args[1:]
    if cmd == "serve":
        from server.config import settings_from_args

        return serve(settings_from_args(rest))
    if cmd == "prepare-model":
        from server.default_model import ensure_default_model

        print(ensure_default_model(progress=True))
        return 0
    if cmd == "check-schema":
        from server.structured.schema_cli import check_schema_main

        return check_schema_main(rest)
    if cmd == "parse":  # no engine, no model: only the parsers are imported
        from server.messages.replay_cli import main as parse_main

        return parse_main(rest)
    print(f"unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
