"""Tool selection accuracy (TSA) of the agent: ``python -m examples.agent.eval [--base-url URL]``.

Each item of eval_items.json is run through the full agent loop. Scored on the first model turn
(the turn that picks the tools for the question):

* TSA: the share of questions whose first turn calls exactly the expected set of tools;
* TSA per tool: of the questions that need a tool, the share whose first turn called it;
* argument accuracy: of the expected tools that were called, the share whose call carries the
  item's key arguments (every term, each 'a|b' meaning either, in one call's JSON arguments);
* per question: tools chosen, model turns taken, latency, whether the iteration limit stopped it;
* unparsable calls (returned calls whose name or arguments do not parse: the server's grammar
  should make this 0) and calls cut by max_tokens (a budget problem, counted apart).

Writes report.md, results.jsonl and confusion.png (expected vs first-turn tool) under --out.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from . import DEFAULT_BASE_URL, Agent, RunResult, default_tools, make_client

__all__ = ["ITEMS", "ItemScore", "confusion", "load_items", "main", "score_item", "summarise"]

ITEMS = Path(__file__).resolve().parent / "eval_items.json"
TOOLS = ("sql_query", "vector_search", "web_search")
NONE = "(no tool)"


def load_items(path: Path = ITEMS) -> list[dict[str, Any]]:
    items = json.loads(path.read_text())["items"]
    for item in items:
        unknown = set(item["expected_tools"]) - set(TOOLS)
        if unknown:
            raise ValueError(f"{item['id']}: unknown expected tools {sorted(unknown)}")
    return items


@dataclass
class ItemScore:
    id: str
    question: str
    expected: list[str]
    chosen: list[str]                 # tools the first turn called (sorted, unique)
    exact: bool
    args_ok: dict[str, bool] = field(default_factory=dict)  # per expected tool that was called
    iterations: int = 0
    latency_s: float = 0.0
    stopped_by_limit: bool = False
    unparsable_calls: int = 0
    cut_calls: int = 0
    error: str | None = None
    answer: str = ""


def _term_ok(term: str, text: str) -> bool:
    return any(alt.strip().lower() in text for alt in term.split("|") if alt.strip())


def score_item(item: dict[str, Any], result: RunResult) -> ItemScore:
    first = result.steps[0] if result.steps else None
    calls = first.actions if first else []
    chosen = sorted({a.name for a in calls})
    expected = sorted(set(item["expected_tools"]))
    args_ok = {}
    for tool in expected:
        if tool not in chosen:
            continue
        terms = item.get("key_args", {}).get(tool, [])
        texts = [json.dumps(a.arguments, ensure_ascii=False).lower() for a in calls if a.name == tool and a.arguments is not None]
        args_ok[tool] = any(all(_term_ok(t, text) for t in terms) for text in texts)
    cut = sum(1 for s in result.steps if s.finish_reason == "length" and (s.cut_calls or _looks_like_call(s.thought)))
    return ItemScore(id=item["id"], question=item["question"], expected=expected, chosen=chosen,
                     exact=chosen == expected, args_ok=args_ok, iterations=result.iterations,
                     latency_s=result.latency_s, stopped_by_limit=result.stopped_by_limit,
                     unparsable_calls=result.unparsable_calls, cut_calls=cut, error=result.error,
                     answer=result.answer)


def _looks_like_call(text: str | None) -> bool:
    """Content cut by max_tokens in the middle of a call ('{"name": ...' or '<tool_call>')."""
    t = (text or "").lstrip()
    return t.startswith(("<tool_call>", '{"name"')) or '<tool_call>' in t


def confusion(scores: Sequence[ItemScore]) -> dict[str, dict[str, int]]:
    """Rows: expected tool; columns: the first turn's pick for it (itself when called, else a tool
    called instead, else no tool). A two-tool question adds one row entry per expected tool."""
    cols = [*TOOLS, NONE]
    matrix = {e: {c: 0 for c in cols} for e in TOOLS}
    for s in scores:
        extra = [c for c in s.chosen if c not in s.expected]
        for e in s.expected:
            matrix[e][e if e in s.chosen else (extra[0] if extra else NONE)] += 1
    return matrix


def summarise(scores: Sequence[ItemScore]) -> dict[str, Any]:
    n = len(scores)
    per_tool = {}
    for tool in TOOLS:
        needing = [s for s in scores if tool in s.expected]
        per_tool[tool] = {"items": len(needing),
                          "tsa": _share(sum(tool in s.chosen for s in needing), len(needing)),
                          "picked_when_not_needed": sum(tool in s.chosen and tool not in s.expected for s in scores)}
    arg_checks = [ok for s in scores for ok in s.args_ok.values()]
    latencies = [s.latency_s for s in scores]
    return {
        "items": n,
        "tsa": _share(sum(s.exact for s in scores), n),
        "tsa_per_tool": per_tool,
        "argument_accuracy": _share(sum(arg_checks), len(arg_checks)),
        "argument_checks": len(arg_checks),
        "first_turn_no_tool": sum(not s.chosen for s in scores),
        "unparsable_calls": sum(s.unparsable_calls for s in scores),
        "calls_cut_by_max_tokens": sum(s.cut_calls for s in scores),
        "stopped_by_limit": sum(s.stopped_by_limit for s in scores),
        "server_errors": sum(s.error is not None for s in scores),
        "mean_iterations": round(statistics.fmean(s.iterations for s in scores), 2) if n else 0.0,
        "latency_s_median": round(statistics.median(latencies), 2) if n else 0.0,
        "latency_s_total": round(sum(latencies), 1),
    }


def _share(k: int, n: int) -> float | None:
    return round(k / n, 3) if n else None


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def plot_confusion(matrix: dict[str, dict[str, int]], path: Path, *, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, cols = list(matrix), list(next(iter(matrix.values())))
    data = [[matrix[r][c] for c in cols] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
    image = ax.imshow(data, cmap="Blues")
    ax.set_xticks(range(len(cols)), labels=cols, rotation=20, ha="right")
    ax.set_yticks(range(len(rows)), labels=rows)
    ax.set_xlabel("chosen on the first turn")
    ax.set_ylabel("expected")
    ax.set_title(title, fontsize=10)
    top = max(max(r) for r in data) or 1
    for i, row in enumerate(data):
        for j, v in enumerate(row):
            ax.text(j, i, str(v), ha="center", va="center", color="white" if v > top / 2 else "black")
    fig.colorbar(image, ax=ax, fraction=0.04)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(out: Path, scores: Sequence[ItemScore], summary: dict[str, Any], *, meta: dict[str, Any]) -> Path:
    matrix = confusion(scores)
    plot_confusion(matrix, out / "confusion.png", title=f"{meta['model']}, tool_choice={meta['tool_choice']}")
    lines = [
        "# Agent tool selection eval", "",
        f"- command: `{meta['command']}`",
        f"- model: `{meta['model']}` at `{meta['base_url']}`, tool_choice `{meta['tool_choice']}`, "
        f"max_iterations {meta['max_iterations']}, max_tokens {meta['max_tokens']}, temperature 0",
        f"- date: {meta['date']}", "",
        "## Summary", "",
        "| measure | value |", "| --- | --- |",
        f"| items | {summary['items']} |",
        f"| TSA (first turn calls exactly the expected tools) | {_fmt(summary['tsa'])} |",
        f"| argument accuracy ({summary['argument_checks']} expected tools called) | {_fmt(summary['argument_accuracy'])} |",
        f"| first turn called no tool | {summary['first_turn_no_tool']} |",
        f"| unparsable tool calls | {summary['unparsable_calls']} |",
        f"| calls cut by max_tokens | {summary['calls_cut_by_max_tokens']} |",
        f"| runs stopped by the iteration limit | {summary['stopped_by_limit']} |",
        f"| turns refused by the server | {summary['server_errors']} |",
        f"| mean model turns per question | {summary['mean_iterations']} |",
        f"| latency per question, median / total (s) | {summary['latency_s_median']} / {summary['latency_s_total']} |",
        "", "## TSA per tool", "", "| tool | questions needing it | TSA | picked when not needed |", "| --- | --- | --- | --- |",
    ]
    for tool, t in summary["tsa_per_tool"].items():
        lines.append(f"| {tool} | {t['items']} | {_fmt(t['tsa'])} | {t['picked_when_not_needed']} |")
    lines += ["", "## Confusion matrix (expected vs first-turn tool)", "", "![confusion matrix](confusion.png)", "",
              "| expected \\ chosen | " + " | ".join(next(iter(matrix.values()))) + " |",
              "| --- |" + " --- |" * len(next(iter(matrix.values())))]
    for e, row in matrix.items():
        lines.append(f"| {e} | " + " | ".join(str(v) for v in row.values()) + " |")
    lines += ["", "## Per question", "",
              "| id | question | expected | first turn | ok | args | turns | latency (s) | limit |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in scores:
        args = ", ".join(f"{t}:{'ok' if ok else 'miss'}" for t, ok in s.args_ok.items()) or "-"
        lines.append(f"| {s.id} | {s.question} | {', '.join(s.expected)} | {', '.join(s.chosen) or NONE} | "
                     f"{'yes' if s.exact else 'no'} | {args} | {s.iterations} | {s.latency_s:.1f} | "
                     f"{'yes' if s.stopped_by_limit else ''}{' error' if s.error else ''} |")
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.agent.eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", default=DEFAULT_BASE_URL, help="default: %(default)s")
    p.add_argument("--api-key", default=None)
    p.add_argument("--model", default=None, help="default: the server's first model")
    p.add_argument("--tool-choice", default="auto", choices=["auto", "required"], help="default: %(default)s")
    p.add_argument("--first-turn", default=None, choices=["auto", "required"],
                   help="tool_choice of the first turn only (default: --tool-choice); 'required' measures "
                        "which tool the model picks when it must pick one")
    p.add_argument("--max-iterations", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=400)
    p.add_argument("--items", type=Path, default=ITEMS)
    p.add_argument("--limit", type=int, default=None, help="only the first N items")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = p.parse_args(argv)

    from tqdm import tqdm

    items = load_items(args.items)[: args.limit]
    client = make_client(base_url=args.base_url, api_key=args.api_key)
    model = args.model or client.models.list().data[0].id
    agent = Agent(client=client, model=model, tools=default_tools(), tool_choice=args.tool_choice,
                  first_tool_choice=args.first_turn, max_iterations=args.max_iterations, max_tokens=args.max_tokens)
    args.out.mkdir(parents=True, exist_ok=True)
    scores: list[ItemScore] = []
    with open(args.out / "results.jsonl", "w") as log, tqdm(items, desc="agent eval", unit="q") as bar:
        for item in bar:
            result = agent.run(item["question"])
            score = score_item(item, result)
            scores.append(score)
            log.write(json.dumps({"score": score.__dict__, "run": result.to_dict()}, ensure_ascii=False, default=str) + "\n")
            log.flush()
            bar.set_postfix(tsa=f"{sum(s.exact for s in scores) / len(scores):.2f}")
    summary = summarise(scores)
    meta = {"command": "python -m examples.agent.eval " + shlex.join(argv if argv is not None else sys.argv[1:]),
            "model": model, "base_url": args.base_url,
            "tool_choice": args.tool_choice + (f" (first turn: {args.first_turn})" if args.first_turn else ""),
            "max_iterations": args.max_iterations, "max_tokens": args.max_tokens,
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    report = write_report(args.out, scores, summary, meta=meta)
    print(f"{'id':5} {'expected':28} {'first turn':28} {'ok':3} {'turns':5} {'s':>6}")
    for s in scores:
        print(f"{s.id:5} {','.join(s.expected):28} {','.join(s.chosen) or NONE:28} {'yes' if s.exact else 'no':3} "
              f"{s.iterations:5} {s.latency_s:6.1f}")
    print(f"TSA {_fmt(summary['tsa'])} over {summary['items']} questions; per tool: " + ", ".join(
        f"{t} {_fmt(v['tsa'])} ({v['items']})" for t, v in summary["tsa_per_tool"].items()))
    print(f"argument accuracy {_fmt(summary['argument_accuracy'])} ({summary['argument_checks']} checks); "
          f"unparsable calls {summary['unparsable_calls']}; cut by max_tokens {summary['calls_cut_by_max_tokens']}; "
          f"mean turns {summary['mean_iterations']}; median latency {summary['latency_s_median']} s")
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
