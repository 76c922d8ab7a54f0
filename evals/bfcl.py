"""BFCL-style tool-calling eval against any OpenAI-compatible server.

Each question (one JSON line, see ``shared/testdata/SOURCES.md``) is sent as a chat request
with its ``tools``; the returned calls are scored three ways:

* **schema-valid**: every returned call names a known tool and its arguments parse and
  validate against that tool's ``parameters`` (JSON Schema Draft 2020-12). Rate over calls.
* **tool selection**: the multiset of called functions (mapped back through ``name_map``)
  equals the ground truth's; for irrelevance questions: no call at all.
* **argument accuracy** (BFCL's AST rule): each ground-truth parameter's value is in its list
  of acceptable values (``""`` in the list = may be omitted), required parameters are present,
  no parameter outside the function's and the ground truth's; parallel calls are matched to
  ground-truth entries order-independently. Irrelevance questions have no arguments to score.

Usage::

    python -m evals.bfcl --base-url http://127.0.0.1:8000/v1 [--api-key K] [--model M]
        [--data DIR] [--categories simple_python parallel ...] [--limit N]
        [--tool-choice auto|required] [--concurrency 8] [--out DIR]

Prints a table per category and writes ``bfcl_report.json`` and ``bfcl_report.md`` to --out.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evals.data import testdata_root

__all__ = [
    "Call",
    "QuestionResult",
    "load_questions",
    "values_match",
    "call_matches",
    "calls_match",
    "selection_correct",
    "schema_problems",
    "score_question",
    "summarize",
    "main",
]

DEFAULT_DATA = testdata_root() / "bfcl"
IRRELEVANCE = ("irrelevance", "live_irrelevance")


@dataclass(frozen=True)
class Call:
    """A returned tool call: the sanitised name the server saw and its raw argument text."""

    name: str
    arguments: str


@dataclass
class QuestionResult:
    id: str
    category: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    content: str | None = None
    finish_reason: str | None = None
    n_calls: int = 0
    n_valid_calls: int = 0
    schema_problems: list[str] = field(default_factory=list)
    selection_ok: bool = False
    args_ok: bool | None = None  # None: irrelevance question (nothing to score)
    error: str | None = None
    status: int | None = None
    seconds: float = 0.0


# ------------------------------------------------------------------ data

def load_questions(data_dir: Path, category: str, *, limit: int | None = None) -> list[dict[str, Any]]:
    """The first ``limit`` questions of ``<data_dir>/<category>.jsonl`` (file order: deterministic)."""
    path = Path(data_dir) / f"{category}.jsonl"
    if not path.exists():
        known = sorted(p.stem for p in Path(data_dir).glob("*.jsonl"))
        raise SystemExit(f"no such category {category!r} in {data_dir} (available: {', '.join(known)})")
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
            if limit is not None and len(out) >= limit:
                break
    return out


# ------------------------------------------------------------------ BFCL's AST rule

_STRIP = re.compile(r"[ ,./\-_*^]")


def _norm_str(s: str) -> str:
    """BFCL's string standardisation: case, spaces and light punctuation do not matter."""
    return _STRIP.sub("", s).lower().replace("'", '"')


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _value_eq(value: Any, expected: Any) -> bool:
    """One model value against one acceptable ground-truth value."""
    if isinstance(expected, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(expected, bool) and value == expected
    if _is_number(expected):
        return _is_number(value) and float(value) == float(expected)
    if isinstance(expected, str):
        return isinstance(value, str) and _norm_str(value) == _norm_str(expected)
    if isinstance(expected, list):
        return (isinstance(value, list) and len(value) == len(expected)
                and all(_value_eq(v, e) for v, e in zip(value, expected)))
    if isinstance(expected, dict):
        return isinstance(value, dict) and _dict_match(value, expected)
    return value == expected


def _dict_match(value: dict[str, Any], expected: dict[str, Any]) -> bool:
    """Nested dict ground truth: key -> acceptable list (BFCL's form), or a plain dict."""
    for key, v in value.items():
        if key not in expected:
            return False
        acceptable = expected[key]
        if isinstance(acceptable, list) and not values_match(v, acceptable):
            return False
        if not isinstance(acceptable, list) and not _value_eq(v, acceptable):
            return False
    for key, acceptable in expected.items():
        if key not in value and not (isinstance(acceptable, list) and "" in acceptable):
            return False
    return True


def values_match(value: Any, acceptable: list[Any]) -> bool:
    """True when ``value`` equals one of the acceptable values (``""`` only means "may be omitted")."""
    return any(_value_eq(value, a) for a in acceptable if not (isinstance(a, str) and a == ""))


def call_matches(args: dict[str, Any], expected: dict[str, list[Any]], *, params_schema: dict[str, Any]) -> bool:
    """BFCL's simple-function check of one call's parsed arguments against one ground-truth entry."""
    known = set((params_schema or {}).get("properties") or {})
    for name, value in args.items():
        if name not in known or name not in expected:
            return False
        if not values_match(value, expected[name]):
            return False
    for name in (params_schema or {}).get("required") or []:
        if name not in args:
            return False
    for name, acceptable in expected.items():
        if name not in args and "" not in acceptable:
            return False
    return True


def _parsed(call: Call) -> dict[str, Any] | None:
    try:
        args = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        return None
    return args if isinstance(args, dict) else None


def calls_match(calls: list[Call], question: dict[str, Any]) -> bool:
    """All calls matched one-to-one to the ground-truth entries, in any order."""
    truth: list[dict[str, Any]] = question.get("ground_truth") or []
    if len(calls) != len(truth):
        return False
    name_map: dict[str, str] = question.get("name_map") or {}
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in question["tools"]}
    pending = list(range(len(truth)))
    for call in calls:
        args = _parsed(call)
        if args is None or call.name not in schemas:
            return False
        original = name_map.get(call.name, call.name)
        for k in pending:
            (gt_name, gt_params), = truth[k].items()
            if gt_name == original and call_matches(args, gt_params, params_schema=schemas[call.name]):
                pending.remove(k)
                break
        else:
            return False
    return not pending


def selection_correct(calls: list[Call], question: dict[str, Any]) -> bool:
    """Right function(s) chosen, as multisets of original names; irrelevance: no call."""
    if question.get("expect_no_call"):
        return not calls
    name_map: dict[str, str] = question.get("name_map") or {}
    got = Counter(name_map.get(c.name, c.name) for c in calls)
    want = Counter(next(iter(gt)) for gt in question.get("ground_truth") or [])
    return got == want


def _call_problem(call: Call, schemas: dict[str, Any]) -> str | None:
    from jsonschema import Draft202012Validator

    if call.name not in schemas:
        return f"unknown function {call.name!r}"
    try:
        args = json.loads(call.arguments)
    except ValueError as exc:
        return f"arguments are not JSON: {exc}"
    err = next(iter(Draft202012Validator(schemas[call.name]).iter_errors(args)), None)
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path) or "(root)"
    return f"at {where}: {err.message}"


def schema_problems(calls: list[Call], tools: list[dict[str, Any]]) -> list[str]:
    """One message per call whose name is unknown or whose arguments do not fit the schema."""
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
    problems = []
    for i, call in enumerate(calls):
        why = _call_problem(call, schemas)
        if why is not None:
            problems.append(f"call {i} ({call.name}): {why}")
    return problems


def score_question(question: dict[str, Any], calls: list[Call], *, category: str) -> QuestionResult:
    """Score one answered question (no network)."""
    problems = schema_problems(calls, question["tools"])
    irrelevant = bool(question.get("expect_no_call"))
    return QuestionResult(
        id=question["id"], category=category,
        calls=[{"name": c.name, "arguments": c.arguments} for c in calls],
        n_calls=len(calls), n_valid_calls=len(calls) - len(problems), schema_problems=problems,
        selection_ok=selection_correct(calls, question),
        args_ok=None if irrelevant else calls_match(calls, question),
    )


# ------------------------------------------------------------------ report

def _rate(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def summarize(results: list[QuestionResult]) -> dict[str, dict[str, Any]]:
    """Per-category (and overall) counts and rates."""
    groups: dict[str, list[QuestionResult]] = {}
    for r in results:
        groups.setdefault(r.category, []).append(r)
    groups["overall"] = list(results)
    out = {}
    for cat, rs in groups.items():
        scored = [r for r in rs if r.args_ok is not None]
        calls = sum(r.n_calls for r in rs)
        valid = sum(r.n_valid_calls for r in rs)
        out[cat] = {
            "n": len(rs),
            "calls": calls,
            "schema_valid_calls": valid,
            "schema_valid_rate": _rate(valid, calls),
            "selection_accuracy": _rate(sum(r.selection_ok for r in rs), len(rs)),
            "argument_accuracy": _rate(sum(bool(r.args_ok) for r in scored), len(scored)),
            "errors": sum(r.error is not None for r in rs),
            "mean_seconds": _rate(sum(r.seconds for r in rs), len(rs)),
        }
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def markdown_table(summary: dict[str, dict[str, Any]]) -> str:
    lines = ["| category | n | calls | schema-valid | tool selection | arguments (BFCL) | errors |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for cat, s in summary.items():
        lines.append(f"| {cat} | {s['n']} | {s['calls']} | {_pct(s['schema_valid_rate'])} | "
                     f"{_pct(s['selection_accuracy'])} | {_pct(s['argument_accuracy'])} | {s['errors']} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ running

def _ask(client: Any, model: str, question: dict[str, Any], *, category: str, tool_choice: str,
         max_tokens: int) -> QuestionResult:
    import openai

    t0 = time.perf_counter()
    try:
        resp = client.chat.completions.create(
            model=model, messages=question["messages"], tools=question["tools"], tool_choice=tool_choice,
            temperature=0, max_tokens=max_tokens,
        )
    except openai.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        message = body.get("message") or (body.get("error") or {}).get("message") or str(exc)
        return QuestionResult(id=question["id"], category=category, error=message, status=exc.status_code,
                              args_ok=None if question.get("expect_no_call") else False,
                              seconds=time.perf_counter() - t0)
    except openai.APIError as exc:
        return QuestionResult(id=question["id"], category=category, error=f"{type(exc).__name__}: {exc}",
                              args_ok=None if question.get("expect_no_call") else False,
                              seconds=time.perf_counter() - t0)
    choice = resp.choices[0]
    calls = [Call(tc.function.name, tc.function.arguments) for tc in choice.message.tool_calls or []]
    result = score_question(question, calls, category=category)
    result.content = choice.message.content
    result.finish_reason = choice.finish_reason
    result.seconds = time.perf_counter() - t0
    return result


def run(*, base_url: str, api_key: str, model: str | None, data: Path, categories: list[str], limit: int | None,
        tool_choice: str, concurrency: int, max_tokens: int) -> tuple[str, list[QuestionResult]]:
    """Ask every question; returns the model name and the results in question order."""
    from openai import OpenAI
    from tqdm import tqdm

    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=2, timeout=600)
    model = model or client.models.list().data[0].id
    work = [(cat, q) for cat in categories for q in load_questions(data, cat, limit=limit)]
    with ThreadPoolExecutor(concurrency) as pool, tqdm(total=len(work), desc=f"bfcl {tool_choice}", unit="q") as bar:
        futures = [pool.submit(_ask, client, model, q, category=cat, tool_choice=tool_choice, max_tokens=max_tokens)
                   for cat, q in work]
        results = []
        for f in futures:
            results.append(f.result())
            bar.update(1)
    return model, results


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evals.bfcl", description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--api-key", default="EMPTY")
    p.add_argument("--model", default=None, help="default: the first model the server lists")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--categories", nargs="+", default=None, help="default: every <category>.jsonl in --data")
    p.add_argument("--limit", type=int, default=None, help="first N questions per category")
    p.add_argument("--tool-choice", choices=("auto", "required"), default="auto")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--out", type=Path, default=Path("bfcl_out"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    categories = args.categories or sorted(p.stem for p in Path(args.data).glob("*.jsonl"))
    if not categories:
        raise SystemExit(f"no *.jsonl question files in {args.data}; pass --data DIR")
    base_url = args.base_url.rstrip("/")
    if not base_url.endswith("/v1"):
        base_url += "/v1"
    t0 = time.perf_counter()
    model, results = run(base_url=base_url, api_key=args.api_key, model=args.model, data=args.data,
                         categories=categories, limit=args.limit, tool_choice=args.tool_choice,
                         concurrency=args.concurrency, max_tokens=args.max_tokens)
    summary = summarize(results)
    meta = {"base_url": base_url, "model": model, "tool_choice": args.tool_choice, "limit": args.limit,
            "categories": categories, "max_tokens": args.max_tokens, "seconds": round(time.perf_counter() - t0, 1)}
    table = markdown_table(summary)
    print(f"\nmodel {model}, tool_choice {args.tool_choice}, limit {args.limit} per category, "
          f"{meta['seconds']} s\n{table}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bfcl_report.json").write_text(json.dumps(
        {"meta": meta, "summary": summary, "results": [asdict(r) for r in results]}, indent=1, ensure_ascii=False))
    (args.out / "bfcl_report.md").write_text(
        f"# BFCL eval: {model}, tool_choice={args.tool_choice}\n\n"
        f"{len(results)} questions, limit {args.limit} per category, temperature 0, max_tokens {args.max_tokens}, "
        f"{meta['seconds']} s.\n\n{table}\n")
    errors = [r for r in results if r.error]
    for r in errors[:10]:
        print(f"error {r.status} on {r.id}: {r.error}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
