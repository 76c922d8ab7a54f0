"""Is an agent's previous prompt a prefix of its next one? Per chat template, per agent step.

#39 asks for an agent's history rendered once: keep the previous turn's rendered prompt and render
only what is new. That is exact only where the template renders a transcript's start the same
whatever follows it. This prints, for each built-in template and each vendored family template
(``tests/data/templates``), whether ``render(previous request, no generation prompt)`` is a prefix
of ``render(next request)`` along the bench's agent transcript (:mod:`bench.workloads`), in two
steps an agent takes:

* ``next user turn``: the previous request ended with a user message, the next one adds the
  call, its result, the answer and the next user message;
* ``after a tool result``: the previous request ended with a tool result, the next one adds the
  model's next message(s) up to the next tool result or user message;

each without and with the assistant's earlier thinking (``reasoning_content``) in the history.
Where it is not a prefix, the table shows where the texts part: the rendered start changed.

    python -m bench.prefix_stability [--templates DIR_OR_FILE ...]
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["STEPS", "step_pairs", "first_difference", "check_template", "main"]

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("next user turn", "after a tool result")


def _history(reasoning: bool) -> list[dict[str, Any]]:
    from bench.workloads import AGENT_TURNS, _agent_history

    messages = _agent_history(len(AGENT_TURNS))
    for m in messages:
        if reasoning and m["role"] == "assistant":
            m["reasoning_content"] = "Let me think about which tool answers this."
    return messages


def step_pairs(step: str, *, reasoning: bool) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """(previous request's messages, next request's messages) along the agent transcript."""
    full = _history(reasoning)
    ends = ("user",) if step == STEPS[0] else ("tool",)
    upto = ("user",) if step == STEPS[0] else ("tool", "user")
    pairs = []
    for cut in [i + 1 for i, m in enumerate(full) if m["role"] in ends]:
        nxt = next((j + 1 for j in range(cut, len(full)) if full[j]["role"] in upto), None)
        if nxt is not None:
            pairs.append((full[:cut], full[:nxt]))
    return pairs


def first_difference(before: str, after: str) -> int | None:
    """Where ``after`` stops beginning with ``before`` (None: it does)."""
    if after.startswith(before):
        return None
    return next((i for i, (x, y) in enumerate(zip(before, after, strict=False)) if x != y), min(len(before), len(after)))


def check_template(name: str, source: str) -> dict[str, str]:
    """Per step and thinking (``"<step>, thinking"``): ``"prefix"`` or where the texts part."""
    from bench.workloads import AGENT_TOOLS
    from server.chat.render import ChatRenderer, RenderError
    from tool_parsers import get_family

    renderer = ChatRenderer(template_name=name, template_source=source,
                            special_tokens={"bos_token": "<s>", "eos_token": "</s>"})
    family = name.removeprefix("builtin:")
    try:
        renderer = renderer.for_family(get_family(family))
    except (KeyError, ValueError):
        pass  # no parser of that name: the template's own call ids
    out: dict[str, str] = {}
    for step in STEPS:
        for reasoning in (False, True):
            verdict = "prefix"
            for before, after in step_pairs(step, reasoning=reasoning):
                try:
                    old = renderer.render(before, tools=AGENT_TOOLS, add_generation_prompt=False)
                    new = renderer.render(after, tools=AGENT_TOOLS, add_generation_prompt=True)
                except RenderError as exc:
                    verdict = f"render error: {exc.message[:60]}"
                    break
                at = first_difference(old, new)
                if at is not None:
                    verdict = f"differs after {len(before)} messages: {old[max(0, at - 12):at + 24]!r}"
                    break
            out[f"{step}{', thinking' if reasoning else ''}"] = verdict
    return out


def _templates(paths: list[str]) -> dict[str, Path]:
    from chat_templates import BUILTIN_TEMPLATES

    found = {f"builtin:{k}": v for k, v in BUILTIN_TEMPLATES.items()}
    for p in map(Path, paths or [str(ROOT / "tests" / "data" / "templates")]):
        found.update({t.stem: t for t in (sorted(p.glob("*.jinja")) if p.is_dir() else [p])})
    return found


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--templates", nargs="*", default=[], help="template files or folders (default: the vendored ones)")
    args = ap.parse_args(argv)
    rows = {name: check_template(name, path.read_text()) for name, path in _templates(args.templates).items()}
    columns = [f"{s}{t}" for s in STEPS for t in ("", ", thinking")]
    print("| template | " + " | ".join(columns) + " |\n|" + " --- |" * (len(columns) + 1))
    for name, verdicts in rows.items():
        print(f"| {name} | " + " | ".join(verdicts[c].replace("|", "\\|") for c in columns) + " |")
    stable = sum(all(v == "prefix" for v in r.values()) for r in rows.values())
    print(f"\n{stable} of {len(rows)} templates keep the previous prompt as a prefix in every step")


if __name__ == "__main__":
    main()
