"""End-to-end JSONSchemaBench coverage and compliance against any OpenAI-compatible server.

For every schema file (``{"schema", "tests": [{"valid", "data"}]}``) of each subset:

1. ``POST /v1/schemas/check`` (when the server has it) for the compile time, cold or cached;
2. one chat request, temperature 0, with the schema in the prompt (as JSONSchemaBench does,
   truncated) and as ``response_format: json_schema`` (``strict`` per flag);
3. the output is parsed and validated with ``jsonschema`` Draft 2020-12 plus format checking;
4. for schemas the server accepted, the labelled instances go through xgrammar's matcher
   (``evals.schema_keywords``: strict_mode=True, after ``normalize_schema``, as the server
   compiles them) to count too-loose / too-strict instances.

Per subset it reports declared coverage (accepted / answered), compliance (valid outputs /
accepted and finished), finish_reason=length, 400s with their top keywords, other errors,
compile p50/p95, the matcher counts, and the paper's published coverage beside it.

Usage::

    python -m evals.jsonschemabench --base-url http://127.0.0.1:8000/v1 [--api-key K] [--model M]
        [--data DIR] [--subsets Github_easy Github_hard] [--limit N] [--concurrency 8]
        [--max-tokens 512] [--strict true|false] [--no-matcher] [--out DIR]

Writes ``jsonschemabench_report.json`` and ``jsonschemabench_report.md`` to --out.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evals.data import testdata_root

import jsonschema

__all__ = [
    "BenchItem",
    "SchemaResult",
    "PAPER_COVERAGE",
    "PAPER_SOURCE",
    "NON_SCHEMA_400_CODES",
    "is_schema_rejection",
    "load_subset",
    "build_prompt",
    "reject_keywords",
    "check_output",
    "percentile",
    "matcher_counts",
    "summarize",
    "markdown_report",
    "main",
]

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = testdata_root() / "jsonschemabench"

#: 400 codes that say nothing about the schema (context length, request shape): reported as
#: errors, not counted against declared coverage. Every other 400 is a refusal of the schema.
NON_SCHEMA_400_CODES = frozenset(
    {"context_length_exceeded", "invalid_json", "missing_required_parameter", "model_not_found",
     "request_too_large", "invalid_api_key", "too_many_tools", "tools_unsupported", "max_tokens_too_small"})
_CONTEXT_WORDS = ("maximum context length", "context length", "too long")

#: Declared coverage per subset published in JSONSchemaBench (arXiv 2501.10868), as fractions.
#: None = not found: the search corpora held only the paper's first page and secondary
#: summaries, never its coverage table, so no figure is filled in from memory.
PAPER_COVERAGE: dict[str, dict[str, float | None]] = {
    sub: {"XGrammar": None, "Guidance": None}
    for sub in ("Glaiveai2K", "Github_trivial", "Github_easy", "Github_medium", "Github_hard",
                "Kubernetes", "Snowplow", "WashingtonPost", "JsonSchemaStore")
}
PAPER_SOURCE = ("JSONSchemaBench, Geng et al., arXiv 2501.10868 (https://arxiv.org/html/2501.10868v2), "
                "coverage table. Figures not retrievable here: shown as n/a.")

_PROMPT = "Generate a JSON object matching this schema: {schema}\nOnly output the JSON object."
_KEYWORD_AT = re.compile(r"(?:^|;\s*|:\s+)([$\w-]+) at (/[^\s;]*)")


@dataclass(frozen=True)
class BenchItem:
    """One schema file: subset, file name, schema and labelled instances ``(valid, data)``."""

    subset: str
    name: str
    schema: Any
    tests: tuple[tuple[bool, Any], ...] = ()


@dataclass
class SchemaResult:
    """What happened to one schema end to end (``status``: accepted | rejected | error)."""

    subset: str
    name: str
    status: str
    http_status: int | None = None
    error_code: str | None = None
    error: str | None = None
    reject_keywords: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    output: str | None = None
    parsed: bool | None = None
    valid: bool | None = None
    why_invalid: str | None = None
    compile_seconds: float | None = None
    compile_cached: bool | None = None
    check_strict_ok: bool | None = None
    matcher: dict[str, Any] | None = None
    completion_tokens: int | None = None
    seconds: float = 0.0


# ------------------------------------------------------------------ data and scoring


def load_subset(data: Path, subset: str, *, limit: int | None = None) -> list[BenchItem]:
    """The first ``limit`` schema files of ``data/subset`` in name order (deterministic)."""
    folder = Path(data) / subset
    if not folder.is_dir():
        raise SystemExit(f"no subset folder {folder}; pass --data DIR or pick --subsets from "
                         f"{sorted(p.name for p in Path(data).iterdir() if p.is_dir()) if Path(data).is_dir() else []}")
    files = sorted(folder.glob("*.json"))[:limit] if limit is not None else sorted(folder.glob("*.json"))
    items = []
    for path in files:
        d = json.loads(path.read_text())
        tests = tuple((bool(t["valid"]), t["data"]) for t in d.get("tests", []))
        items.append(BenchItem(subset, path.name, d["schema"], tests))
    return items


def build_prompt(schema: Any, *, max_chars: int = 3000) -> str:
    """The JSONSchemaBench-style instruction with the compact schema, cut at ``max_chars``.

    Long schemas are cut (with a marker) so prompt + max_tokens fits a small context window;
    the grammar, not the prompt, carries the full schema.
    """
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    if len(text) > max_chars:
        text = text[:max_chars] + " ...(truncated)"
    return _PROMPT.format(schema=text)


def reject_keywords(message: str | None, code: str | None) -> list[str]:
    """Keywords a 400 names (``uniqueItems at /p ...``), one entry each; else the error code."""
    found = list(dict.fromkeys(m.group(1) for m in _KEYWORD_AT.finditer(message or "")))
    return found or [code or "unknown"]


def is_schema_rejection(status: int | None, code: str | None, message: str | None) -> bool:
    """A 400 that refuses the schema (vs. one about the prompt or the request's shape)."""
    if status != 400 or code in NON_SCHEMA_400_CODES:
        return False
    return not (code is None and any(w in (message or "").lower() for w in _CONTEXT_WORDS))


def check_output(text: str | None, schema: Any) -> tuple[bool, bool, str | None]:
    """(parsed, valid, why not) for one output: Draft 2020-12 with format checking."""
    try:
        value = json.loads(text or "")
    except ValueError as exc:
        return False, False, f"not JSON: {exc}"
    cls = jsonschema.Draft202012Validator
    try:
        errors = list(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(value))
    except Exception as exc:  # noqa: BLE001 - unresolvable $ref etc.: say so, never count as valid
        return True, False, f"could not validate: {type(exc).__name__}: {str(exc)[:200]}"
    if not errors:
        return True, True, None
    first = min(errors, key=lambda e: len(e.path))
    where = "/" + "/".join(str(p) for p in first.absolute_path)
    return True, False, f"{first.validator} at {where}: {first.message[:200]}"


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def matcher_counts(item: BenchItem) -> dict[str, Any]:
    """xgrammar matcher verdicts on the labelled instances, compiled as the server compiles them."""
    from evals.schema_keywords import Case, evaluate_case

    case = Case("bench", item.subset, f"{item.subset}/{item.name}", item.schema, item.tests)
    r = evaluate_case(case, strict_mode=True, normalize=isinstance(item.schema, dict))
    return {"compiled": r.compiled, "error": r.error, "valid": r.n_valid, "invalid": r.n_invalid,
            "too_strict": r.too_strict, "order_only": r.order_only, "too_loose": r.too_loose,
            "label_fixes": len(r.label_fixes), "loose_examples": r.loose_examples[:2],
            "strict_examples": r.strict_examples[:2]}


def _rate(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def _summary_row(rs: list[SchemaResult]) -> dict[str, Any]:
    accepted = [r for r in rs if r.status == "accepted"]
    rejected = [r for r in rs if r.status == "rejected"]
    errors = [r for r in rs if r.status == "error"]
    finished = [r for r in accepted if r.finish_reason == "stop"]
    valid = sum(bool(r.valid) for r in finished)
    reasons: Counter[str] = Counter()
    for r in rejected:
        reasons.update(r.reject_keywords)
    cold = [r.compile_seconds for r in rs if r.compile_seconds is not None and not r.compile_cached]
    warm = [r.compile_seconds for r in rs if r.compile_seconds is not None and r.compile_cached]
    timed = cold or warm
    matched = [r.matcher for r in accepted if r.matcher is not None]
    return {
        "schemas": len(rs),
        "accepted": len(accepted),
        "rejected_400": len(rejected),
        "other_errors": len(errors),
        "declared_coverage": _rate(len(accepted), len(accepted) + len(rejected)),
        "finished": len(finished),
        "length": sum(r.finish_reason == "length" for r in accepted),
        "other_finish": sum(r.finish_reason not in ("stop", "length") for r in accepted),
        "valid_outputs": valid,
        "compliance": _rate(valid, len(finished)),
        "not_json": sum(r.parsed is False for r in finished),
        "top_reject_reasons": dict(reasons.most_common(8)),
        "error_kinds": dict(Counter(r.error_code or str(r.http_status or "exception") for r in errors)),
        "compile_p50": percentile(timed, 50),
        "compile_p95": percentile(timed, 95),
        "compile_basis": "cold" if cold else ("cached" if warm else "n/a"),
        "compile_cold": len(cold),
        "compile_cached": len(warm),
        "check_disagrees": sum(r.check_strict_ok is not None and r.check_strict_ok != (r.status == "accepted")
                               for r in rs if r.status != "error"),
        "matcher_schemas": len(matched),
        "matcher_not_compiled": sum(not m["compiled"] for m in matched),
        "too_loose": sum(m["too_loose"] for m in matched),
        "too_strict": sum(m["too_strict"] for m in matched),
        "order_only": sum(m["order_only"] for m in matched),
        "matcher_invalid_instances": sum(m["invalid"] for m in matched),
        "matcher_valid_instances": sum(m["valid"] for m in matched),
        "mean_seconds": _rate(sum(r.seconds for r in rs), len(rs)),
        "invalid_examples": [f"{r.name}: {r.why_invalid}" for r in finished if not r.valid][:5],
        "loose_examples": [f"{r.name}: {e}" for r in accepted if r.matcher for e in r.matcher.get("loose_examples", [])][:5],
    }


def summarize(results: list[SchemaResult]) -> dict[str, dict[str, Any]]:
    """Per-subset rows (in first-seen order) and an ``all`` row."""
    groups: dict[str, list[SchemaResult]] = {}
    for r in results:
        groups.setdefault(r.subset, []).append(r)
    out = {sub: _summary_row(rs) for sub, rs in groups.items()}
    if len(groups) > 1:
        out["all"] = _summary_row(list(results))
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _secs(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _paper(sub: str, engine: str) -> str:
    return _pct(PAPER_COVERAGE.get(sub, {}).get(engine))


def markdown_report(summary: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    """The tables the CLI prints and writes: coverage/compliance, rejections, matcher counts."""
    lines = [
        f"# JSONSchemaBench end to end: {meta.get('model')}, strict={meta.get('strict')}",
        "",
        f"{meta.get('base_url')}, limit {meta.get('limit')} per subset, temperature 0, "
        f"max_tokens {meta.get('max_tokens')}, {meta.get('seconds')} s.",
        "",
        "| subset | schemas | accepted | 400 | other errors | declared coverage | paper XGrammar | paper Guidance "
        "| finished | length | compliance | compile p50 / p95 s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for sub, s in summary.items():
        lines.append(
            f"| {sub} | {s['schemas']} | {s['accepted']} | {s['rejected_400']} | {s['other_errors']} | "
            f"{_pct(s['declared_coverage'])} | {_paper(sub, 'XGrammar')} | {_paper(sub, 'Guidance')} | "
            f"{s['finished']} | {s['length']} | {_pct(s['compliance'])} ({s['valid_outputs']}/{s['finished']}) | "
            f"{_secs(s['compile_p50'])} / {_secs(s['compile_p95'])} ({s['compile_basis']}, "
            f"{s['compile_cold']} cold, {s['compile_cached']} cached) |")
    lines += ["", f"Paper figures: {PAPER_SOURCE}", "",
              "## Matcher check on accepted schemas (labelled instances, xgrammar strict_mode=True, normalised)",
              "", "| subset | schemas | not compiled | invalid instances | too loose | valid instances | too strict "
              "| order-only |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for sub, s in summary.items():
        lines.append(f"| {sub} | {s['matcher_schemas']} | {s['matcher_not_compiled']} | "
                     f"{s['matcher_invalid_instances']} | {s['too_loose']} | {s['matcher_valid_instances']} | "
                     f"{s['too_strict']} | {s['order_only']} |")
    lines += ["", "## Why schemas were refused (schemas per keyword named in the 400)", ""]
    for sub, s in summary.items():
        reasons = ", ".join(f"`{k}` {v}" for k, v in s["top_reject_reasons"].items()) or "none"
        errs = ", ".join(f"{k} {v}" for k, v in s["error_kinds"].items()) or "none"
        lines.append(f"- **{sub}**: {reasons}; other errors: {errs}; "
                     f"/v1/schemas/check disagrees with the chat verdict on {s['check_disagrees']}")
    bad = [(sub, e) for sub, s in summary.items() if sub != "all" for e in s["invalid_examples"] + s["loose_examples"]]
    if bad:
        lines += ["", "## Finished outputs that failed validation / too-loose instances", ""]
        lines += [f"- {sub}: `{e[:300]}`" for sub, e in bad]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ running


def _check(http: Any, root: str, schema: Any) -> tuple[float | None, bool | None, bool | None, bool]:
    """(compile seconds, cached, strict_ok, endpoint exists) from POST /v1/schemas/check."""
    try:
        resp = http.post(f"{root}/v1/schemas/check", json={"schema": schema} if isinstance(schema, dict) else schema)
    except Exception:  # noqa: BLE001 - no compile figure, the chat request still runs
        return None, None, None, True
    if resp.status_code in (404, 405):
        return None, None, None, False
    if resp.status_code != 200:
        return None, None, None, True
    items = resp.json().get("items") or [{}]
    item = items[0]
    return item.get("compile_seconds"), item.get("cached"), item.get("strict_ok"), True


def _error_parts(exc: Any) -> tuple[str | None, str]:
    body = exc.body if isinstance(getattr(exc, "body", None), dict) else {}
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    return inner.get("code") or getattr(exc, "code", None), inner.get("message") or str(exc)


def _run_one(client: Any, http: Any | None, root: str, model: str, item: BenchItem, *, strict: bool,
             max_tokens: int, prompt_chars: int, matcher: bool) -> SchemaResult:
    import openai

    res = SchemaResult(item.subset, item.name, status="error")
    t0 = time.perf_counter()
    if http is not None:
        res.compile_seconds, res.compile_cached, res.check_strict_ok, _ = _check(http, root, item.schema)
    rf = {"type": "json_schema", "json_schema": {"name": "bench", "schema": item.schema, "strict": strict}}
    try:
        resp = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": build_prompt(item.schema, max_chars=prompt_chars)}],
            response_format=rf, temperature=0, max_tokens=max_tokens)
    except openai.APIStatusError as exc:
        res.http_status = exc.status_code
        res.error_code, res.error = _error_parts(exc)
        if is_schema_rejection(exc.status_code, res.error_code, res.error):
            res.status = "rejected"
            res.reject_keywords = reject_keywords(res.error, res.error_code)
        res.seconds = time.perf_counter() - t0
        return res
    except openai.APIError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
        res.seconds = time.perf_counter() - t0
        return res
    choice = resp.choices[0]
    res.status, res.finish_reason = "accepted", choice.finish_reason
    res.output = choice.message.content
    res.completion_tokens = resp.usage.completion_tokens if resp.usage else None
    if choice.finish_reason == "stop":
        res.parsed, res.valid, res.why_invalid = check_output(res.output, item.schema)
    res.seconds = time.perf_counter() - t0
    if matcher:
        res.matcher = matcher_counts(item)
    return res


def run(*, base_url: str, api_key: str, model: str | None, items: list[BenchItem], strict: bool, concurrency: int,
        max_tokens: int, prompt_chars: int, matcher: bool) -> tuple[str, bool, list[SchemaResult]]:
    """Every schema through the server; returns (model, has /v1/schemas/check, results in input order)."""
    import httpx
    from openai import OpenAI
    from tqdm import tqdm

    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=2, timeout=900)
    model = model or client.models.list().data[0].id
    root = base_url.removesuffix("/v1")
    http = httpx.Client(headers={"Authorization": f"Bearer {api_key}"}, timeout=300)
    probe = _check(http, root, {"type": "object"})
    has_check = probe[3]
    results: list[SchemaResult | None] = [None] * len(items)
    with ThreadPoolExecutor(concurrency) as pool, tqdm(total=len(items), desc=f"jsonschemabench strict={strict}",
                                                       unit="schema") as bar:
        futures = {pool.submit(_run_one, client, http if has_check else None, root, model, it, strict=strict,
                               max_tokens=max_tokens, prompt_chars=prompt_chars, matcher=matcher): i
                   for i, it in enumerate(items)}
        for f in as_completed(futures):
            results[futures[f]] = f.result()
            bar.update(1)
    http.close()
    return model, has_check, [r for r in results if r is not None]


def _print_summary(summary: dict[str, dict[str, Any]]) -> None:
    head = (f"{'subset':16s} {'n':>4s} {'acc':>4s} {'400':>4s} {'err':>4s} {'coverage':>9s} {'xgr':>6s} {'guid':>6s} "
            f"{'fin':>4s} {'len':>4s} {'compliance':>10s} {'p50 s':>7s} {'p95 s':>7s} {'loose':>5s} {'strict':>6s}")
    print(head)
    for sub, s in summary.items():
        print(f"{sub[:16]:16s} {s['schemas']:4d} {s['accepted']:4d} {s['rejected_400']:4d} {s['other_errors']:4d} "
              f"{_pct(s['declared_coverage']):>9s} {_paper(sub, 'XGrammar'):>6s} {_paper(sub, 'Guidance'):>6s} "
              f"{s['finished']:4d} {s['length']:4d} {_pct(s['compliance']):>10s} {_secs(s['compile_p50']):>7s} "
              f"{_secs(s['compile_p95']):>7s} {s['too_loose']:5d} {s['too_strict']:6d}")
        if s["top_reject_reasons"]:
            print(f"{'':16s} 400 reasons: " + ", ".join(f"{k} {v}" for k, v in s["top_reject_reasons"].items()))
    print(f"paper: {PAPER_SOURCE}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evals.jsonschemabench", description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--api-key", default="EMPTY")
    p.add_argument("--model", default=None, help="default: the first model the server lists")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of <Subset>/*.json files")
    p.add_argument("--subsets", nargs="+", default=None, help="default: every subset folder in --data")
    p.add_argument("--limit", type=int, default=None, help="first N schema files per subset (name order)")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--prompt-chars", type=int, default=3000, help="cut the schema in the prompt at this length")
    p.add_argument("--strict", choices=("true", "false"), default="true")
    p.add_argument("--no-matcher", action="store_true", help="skip the local xgrammar matcher check")
    p.add_argument("--out", type=Path, default=Path("jsonschemabench_out"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    data = Path(args.data).resolve()
    subsets = args.subsets
    if not subsets and data.is_dir():
        subsets = sorted(p.name for p in data.iterdir() if p.is_dir())
    if not subsets:
        raise SystemExit(f"no subset folders in {data}; pass --data DIR")
    items = [it for sub in subsets for it in load_subset(data, sub, limit=args.limit)]
    base_url = args.base_url.rstrip("/")
    if not base_url.endswith("/v1"):
        base_url += "/v1"
    t0 = time.perf_counter()
    model, has_check, results = run(
        base_url=base_url, api_key=args.api_key, model=args.model, items=items, strict=args.strict == "true",
        concurrency=args.concurrency, max_tokens=args.max_tokens, prompt_chars=args.prompt_chars,
        matcher=not args.no_matcher)
    summary = summarize(results)
    meta = {"base_url": base_url, "model": model, "strict": args.strict, "limit": args.limit, "subsets": subsets,
            "max_tokens": args.max_tokens, "prompt_chars": args.prompt_chars, "schemas_check_endpoint": has_check,
            "matcher": not args.no_matcher, "seconds": round(time.perf_counter() - t0, 1),
            "paper_source": PAPER_SOURCE}
    print()
    _print_summary(summary)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "jsonschemabench_report.json").write_text(json.dumps(
        {"meta": meta, "summary": summary, "paper_coverage": PAPER_COVERAGE,
         "results": [asdict(r) for r in results]}, indent=1, ensure_ascii=False, default=str))
    (args.out / "jsonschemabench_report.md").write_text(markdown_report(summary, meta))
    print(f"wrote {args.out}/jsonschemabench_report.json and .md ({meta['seconds']} s)")
    for r in [r for r in results if r.status == "error"][:10]:
        print(f"error {r.http_status} on {r.subset}/{r.name}: {(r.error or '')[:300]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
