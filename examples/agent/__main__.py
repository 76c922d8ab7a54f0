"""Ask the agent one question: ``python -m examples.agent "How many orders in March?" --trace``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from . import DEFAULT_BASE_URL, Agent, Step, default_tools, make_client

__all__ = ["main", "print_step"]


def print_step(step: Step, out: TextIO = sys.stderr) -> None:
    """Thought / action / observation lines for one turn."""
    if step.thought:
        out.write(f"[{step.iteration}] thought: {step.thought.strip()}\n")
    for action in step.actions:
        out.write(f"[{step.iteration}] action: {action.name}({action.raw_arguments})\n")
    for obs in step.observations:
        flags = " (cached)" if obs.cached else ""
        flags += f" (attempts: {obs.attempts})" if obs.attempts > 1 else ""
        text = json.dumps(obs.content, ensure_ascii=False, default=str)
        out.write(f"[{step.iteration}] observation {obs.name}{flags}: {text[:600]}{'...' if len(text) > 600 else ''}\n")
    out.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.agent", description=__doc__)
    p.add_argument("question", nargs="+", help="the question (several words are joined)")
    p.add_argument("--base-url", default=DEFAULT_BASE_URL, help="OpenAI-compatible endpoint (default: %(default)s)")
    p.add_argument("--api-key", default=None, help="bearer key (default: $OPENAI_API_KEY)")
    p.add_argument("--model", default=None, help="model name (default: the server's first model)")
    p.add_argument("--tool-choice", default="auto", choices=["auto", "required"], help="default: %(default)s")
    p.add_argument("--first-turn", default=None, choices=["auto", "required"], help="tool_choice of the first turn only")
    p.add_argument("--max-iterations", type=int, default=6, help="tool turns before answering (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=256, help="per model turn (default: %(default)s)")
    p.add_argument("--db", type=Path, default=None, help="database file (default: a fresh copy in a temp folder)")
    p.add_argument("--trace", action="store_true", help="print each thought / action / observation to stderr")
    p.add_argument("--trace-file", type=Path, default=None, help="also write the run (all steps) as JSON here")
    args = p.parse_args(argv)

    client = make_client(base_url=args.base_url, api_key=args.api_key)
    model = args.model or client.models.list().data[0].id
    agent = Agent(client=client, model=model, tools=default_tools(db_path=args.db),
                  tool_choice=args.tool_choice, first_tool_choice=args.first_turn, max_iterations=args.max_iterations,
                  max_tokens=args.max_tokens, on_step=print_step if args.trace else None)
    result = agent.run(" ".join(args.question))
    if args.trace_file:
        args.trace_file.parent.mkdir(parents=True, exist_ok=True)
        args.trace_file.write_text(json.dumps(result.to_dict(), indent=2, ensure_ascii=False, default=str))
    print(result.answer)
    if args.trace:
        sys.stderr.write(f"-- {result.iterations} model turns, tools: {result.tools_called() or 'none'}, "
                         f"{result.latency_s:.1f} s{', stopped by the iteration limit' if result.stopped_by_limit else ''}\n")
    return 1 if result.error else 0


if __name__ == "__main__":
    raise SystemExit(main())
