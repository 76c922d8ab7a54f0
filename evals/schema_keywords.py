"""Measure how exactly XGrammar enforces each JSON Schema keyword.

Runs the official JSON-Schema-Test-Suite (draft 2020-12) and the labelled JSONSchemaBench
instances through grammars compiled by the installed xgrammar and checks, at string level
with a ``GrammarMatcher`` over an empty tokenizer, whether each instance is accepted:

* a valid instance that no serialisation gets through is *too strict*;
* an invalid instance that some serialisation gets through is *too loose*;
* a valid instance accepted only when its keys are written in the schema's declared order is
  counted separately (*order-only*), because the grammar fixes property order.

Labels are re-checked with python-jsonschema (format checking on); where the label and
jsonschema disagree, jsonschema wins and the disagreement is reported.

Usage::

    python -m evals.schema_keywords --out /tmp/schema_report [--strict-mode both]
        [--suite test-suite|bench|all] [--normalize] [--per-file N]

Prints a table and writes ``schema_keywords.json`` and ``schema_keywords.md`` under --out.
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import jsonschema
import xgrammar as xgr

from evals.data import testdata_root
from server.json_types import integral_numbers

__all__ = [
    "Case",
    "CaseResult",
    "Matcher",
    "testdata_root",
    "load_test_suite",
    "load_bench",
    "true_labels",
    "serialisations",
    "evaluate_case",
    "aggregate",
    "main",
]

REPO = Path(__file__).resolve().parents[1]
_XGR_VERSION = importlib.metadata.version("xgrammar")


@dataclass(frozen=True)
class Case:
    """One schema with labelled instances; ``group`` is the keyword file or bench subset."""

    suite: str  # "test-suite" | "bench"
    group: str
    name: str
    schema: Any
    tests: tuple[tuple[bool, Any], ...]


@dataclass
class CaseResult:
    case: Case
    compiled: bool
    error: str = ""
    n_valid: int = 0
    n_invalid: int = 0
    too_strict: int = 0
    too_loose: int = 0
    order_only: int = 0
    label_fixes: list[str] = field(default_factory=list)
    loose_keywords: collections.Counter = field(default_factory=collections.Counter)
    loose_examples: list[str] = field(default_factory=list)
    strict_examples: list[str] = field(default_factory=list)


def load_test_suite(root: Path | None = None, *, per_file: int | None = None) -> list[Case]:
    """Every group of every draft2020-12 keyword file (``per_file`` keeps a deterministic prefix)."""
    base = (root or testdata_root()) / "json_schema_test_suite" / "draft2020-12"
    cases: list[Case] = []
    for path in sorted(base.glob("*.json")):
        groups = json.loads(path.read_text())
        if per_file is not None:
            groups = groups[:per_file]
        for i, g in enumerate(groups):
            tests = tuple((bool(t["valid"]), t["data"]) for t in g["tests"])
            cases.append(Case("test-suite", path.stem, f"{path.stem}#{i} {g['description']}", g["schema"], tests))
    return cases


def load_bench(root: Path | None = None, *, per_subset: int | None = None) -> list[Case]:
    """JSONSchemaBench instances per subset (``per_subset`` keeps a deterministic prefix)."""
    base = (root or testdata_root()) / "jsonschemabench"
    cases: list[Case] = []
    for sub in sorted(p for p in base.iterdir() if p.is_dir()):
        files = sorted(sub.glob("*.json"))
        if per_subset is not None:
            files = files[:per_subset]
        for path in files:
            d = json.loads(path.read_text())
            tests = tuple((bool(t["valid"]), t["data"]) for t in d.get("tests", []))
            cases.append(Case("bench", sub.name, f"{sub.name}/{path.name}", d["schema"], tests))
    return cases


def _validator(schema: Any) -> jsonschema.protocols.Validator | None:
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        return cls(schema, format_checker=cls.FORMAT_CHECKER)
    except Exception:  # noqa: BLE001 - an unusable schema keeps its labels
        return None


def true_labels(case: Case) -> tuple[list[bool], list[str], list[list[str]]]:
    """(truth per instance, label disagreements, failing keyword paths per instance).

    Uses the validator the schema's ``$schema`` names (2020-12 by default) with format checks.
    """
    v = _validator(case.schema)
    truth: list[bool] = []
    fixes: list[str] = []
    why: list[list[str]] = []
    for i, (label, data) in enumerate(case.tests):
        if v is None:
            truth.append(label)
            why.append([])
            continue
        try:
            errors = list(v.iter_errors(data))
        except Exception:  # noqa: BLE001 - unresolvable $ref etc.: keep the label
            truth.append(label)
            why.append([])
            continue
        ok = not errors
        if ok != label:
            fixes.append(f"{case.name} [{i}] label={label} jsonschema={ok}")
        truth.append(ok)
        why.append(sorted({_error_keyword(e) for e in errors}))
    return truth, fixes, why


def _error_keyword(err: jsonschema.ValidationError) -> str:
    """The deepest keyword that failed, e.g. ``uniqueItems`` (anyOf/oneOf look inside)."""
    e = err
    while e.context:
        e = min(e.context, key=lambda c: len(c.context))
    return str(e.validator)


# --- serialisation --------------------------------------------------------------------------


def _collect_property_orders(schema: Any, out: list[list[str]], seen: set[int]) -> None:
    if id(schema) in seen:
        return
    seen.add(id(schema))
    if isinstance(schema, dict):
        props = schema.get("properties")
        if isinstance(props, dict) and props:
            out.append(list(props))
        for k, v in schema.items():
            if k in ("enum", "const", "examples", "default", "required"):
                continue
            _collect_property_orders(v, out, seen)
    elif isinstance(schema, list):
        for v in schema:
            _collect_property_orders(v, out, seen)


def _schema_ordered(data: Any, orders: list[list[str]]) -> Any:
    """Reorder object keys as the best-matching ``properties`` declaration lists them."""
    if isinstance(data, list):
        return [_schema_ordered(x, orders) for x in data]
    if not isinstance(data, dict):
        return data
    keys = list(data)
    best: list[str] = []
    best_overlap = 0
    for order in orders:
        overlap = len(set(order) & set(keys))
        if overlap > best_overlap:
            best, best_overlap = order, overlap
    rank = {k: i for i, k in enumerate(best)}
    pos = {k: i for i, k in enumerate(keys)}
    keys.sort(key=lambda k: (rank.get(k, len(best)), pos[k]))
    return {k: _schema_ordered(data[k], orders) for k in keys}


def _integral(data: Any) -> Any:
    """1.0 → 1: JSON Schema treats integral floats as integers; the grammar's integer rule does not."""
    return integral_numbers(data, below=2**63)


def serialisations(data: Any, schema: Any) -> dict[str, str]:
    """Texts of the same JSON value: own key order (unicode / ascii), schema order, integral."""
    orders: list[list[str]] = []
    _collect_property_orders(schema, orders, set())
    ordered = _schema_ordered(data, orders)
    variants = {
        "own": json.dumps(data, ensure_ascii=False),
        "own_ascii": json.dumps(data),
        "schema_order": json.dumps(ordered, ensure_ascii=False),
        "own_int": json.dumps(_integral(data), ensure_ascii=False),
        "schema_order_int": json.dumps(_integral(ordered), ensure_ascii=False),
    }
    return variants


# --- matching --------------------------------------------------------------------------------


class Matcher:
    """Compile a schema once and test strings against it (empty tokenizer: string level)."""

    _compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)

    def __init__(self, schema: Any, *, strict_mode: bool, any_whitespace: bool = True) -> None:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        grammar = xgr.Grammar.from_json_schema(text, any_whitespace=any_whitespace, strict_mode=strict_mode)
        self._matcher = xgr.GrammarMatcher(self._compiler.compile_grammar(grammar), terminate_without_stop_token=True)

    def accepts(self, text: str) -> bool:
        self._matcher.reset()
        return bool(self._matcher.accept_string(text)) and self._matcher.is_terminated()


def evaluate_case(case: Case, *, strict_mode: bool = False, normalize: bool = False) -> CaseResult:
    """Compile ``case.schema`` and classify every instance (see module docstring)."""
    schema = case.schema
    if normalize:
        from server.structured.schema_support import normalize_schema

        schema = normalize_schema(schema) if isinstance(schema, dict) else schema
    truth, fixes, why = true_labels(case)
    res = CaseResult(case=case, compiled=False, label_fixes=fixes)
    try:
        m = Matcher(schema, strict_mode=strict_mode)
    except Exception as e:  # noqa: BLE001 - the compiler's refusal is the measurement
        res.error = str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__
        return res
    res.compiled = True
    for ok, (_, data), keywords in zip(truth, case.tests, why):
        texts = serialisations(data, case.schema)
        if ok:
            res.n_valid += 1
            own = m.accepts(texts["own"]) or m.accepts(texts["own_ascii"]) or m.accepts(texts["own_int"])
            if own:
                continue
            if m.accepts(texts["schema_order"]) or m.accepts(texts["schema_order_int"]):
                res.order_only += 1
            else:
                res.too_strict += 1
                if len(res.strict_examples) < 3:
                    res.strict_examples.append(texts["own"][:160])
        else:
            res.n_invalid += 1
            if any(m.accepts(t) for t in dict.fromkeys(texts.values())):
                res.too_loose += 1
                res.loose_keywords.update(keywords or ["?"])
                if len(res.loose_examples) < 3:
                    res.loose_examples.append(f"{texts['own'][:160]} (fails: {', '.join(keywords)})")
    return res


# --- aggregation and reports -----------------------------------------------------------------


def schema_keywords(schema: Any) -> set[str]:
    """Keywords a schema uses anywhere (for the bench's per-keyword and combination tables)."""
    from server.structured.schema_support import analyze_schema

    if not isinstance(schema, dict):
        return set()
    return {u.keyword for u in analyze_schema(schema).entries if u.level != "ANNOTATION"}


def _row() -> dict[str, int]:
    return dict(schemas=0, rejected=0, valid=0, invalid=0, too_strict=0, order_only=0, too_loose=0,
                strict_accepts=0, strict_accepts_loose=0)


def aggregate(results: list[CaseResult], *, strict_ok: dict[str, bool] | None = None) -> dict[str, Any]:
    """Per test-suite keyword file, per bench subset, per bench keyword and keyword combination."""
    by_group: dict[str, dict[str, int]] = collections.defaultdict(_row)
    by_kw: dict[str, dict[str, int]] = collections.defaultdict(_row)
    by_combo: dict[str, dict[str, int]] = collections.defaultdict(_row)
    loose_by_failing_kw: collections.Counter = collections.Counter()
    fixes: list[str] = []
    examples: dict[str, list[str]] = collections.defaultdict(list)
    for r in results:
        keys = [f"{r.case.suite}:{r.case.group}"]
        rows = [by_group[keys[0]]]
        if r.case.suite == "bench":
            kws = schema_keywords(r.case.schema)
            rows += [by_kw[k] for k in sorted(kws)]
            rows.append(by_combo[" + ".join(sorted(kws - _BASIC)) or "(basic only)"])
        ok = strict_ok.get(r.case.name) if strict_ok else None
        for row in rows:
            row["schemas"] += 1
            row["rejected"] += 0 if r.compiled else 1
            for k in ("n_valid", "n_invalid", "too_strict", "order_only", "too_loose"):
                row[k.removeprefix("n_")] += getattr(r, k)
            if ok and r.compiled:
                row["strict_accepts"] += 1
                row["strict_accepts_loose"] += r.too_loose
        loose_by_failing_kw.update(r.loose_keywords)
        fixes += r.label_fixes
        if r.too_loose or r.too_strict or not r.compiled:
            ex = examples[keys[0]]
            if len(ex) < 4:
                what = r.error or "; ".join(r.loose_examples[:1] + [f"too strict: {s}" for s in r.strict_examples[:1]])
                ex.append(f"{r.case.name}: {what}")
    totals = _row()
    for row in by_group.values():
        for k, v in row.items():
            totals[k] += v
    return dict(totals=totals, by_group=dict(by_group), by_keyword=dict(by_kw),
                by_combination=dict(sorted(by_combo.items(), key=lambda kv: -kv[1]["schemas"])[:40]),
                loose_by_failing_keyword=dict(loose_by_failing_kw.most_common()),
                label_fixes=fixes, examples=dict(examples))


# Keywords every bench schema has; left out of the combination key so combinations stay readable.
_BASIC = {"type", "properties", "required", "items", "$ref", "enum", "additionalProperties"}

_COLS = ("schemas", "rejected", "valid", "too_strict", "order_only", "invalid", "too_loose", "strict_accepts", "strict_accepts_loose")


def _table(rows: dict[str, dict[str, int]], title: str) -> str:
    head = "| " + title + " | " + " | ".join(_COLS) + " |"
    sep = "|---" * (len(_COLS) + 1) + "|"
    body = [f"| {k} | " + " | ".join(str(v[c]) for c in _COLS) + " |" for k, v in sorted(rows.items())]
    return "\n".join([head, sep, *body])


def render_markdown(report: dict[str, Any]) -> str:
    parts = [f"# XGrammar {_XGR_VERSION} JSON Schema keyword measurement\n"]
    for mode, agg in report["modes"].items():
        parts.append(f"## strict_mode={mode}\n")
        parts.append(_table({"TOTAL": agg["totals"]}, "all"))
        parts.append("\n### Per keyword file / bench subset\n")
        parts.append(_table(agg["by_group"], "group"))
        parts.append("\n### Bench: per keyword used\n")
        parts.append(_table(agg["by_keyword"], "keyword"))
        parts.append("\n### Bench: commonest keyword combinations (beyond basic ones)\n")
        parts.append(_table(agg["by_combination"], "combination"))
        parts.append("\n### Too-loose instances by the keyword jsonschema says they fail\n")
        parts += [f"- {k}: {v}" for k, v in agg["loose_by_failing_keyword"].items()]
        parts.append("\n### Examples\n")
        for g, ex in sorted(agg["examples"].items()):
            parts += [f"- `{e[:300]}`" for e in ex]
        parts.append(f"\n### Label disagreements ({len(agg['label_fixes'])})\n")
        parts += [f"- {f}" for f in agg["label_fixes"]]
        parts.append("")
    return "\n".join(parts)


def _print_table(agg: dict[str, Any], mode: str) -> None:
    print(f"\n== strict_mode={mode} ==")
    print(f"{'group':44s} " + " ".join(f"{c[:10]:>10s}" for c in _COLS))
    for k, v in sorted(agg["by_group"].items()) + [("TOTAL", agg["totals"])]:
        print(f"{k[:44]:44s} " + " ".join(f"{v[c]:>10d}" for c in _COLS))
    print("too loose by failing keyword:", agg["loose_by_failing_keyword"])
    print("label disagreements:", len(agg["label_fixes"]))


def strict_acceptance(cases: Iterable[Case], *, strict_mode: bool, normalize: bool) -> dict[str, bool]:
    """Whether ``analyze_schema`` finds no strict problems (fail-closed strict accepts it)."""
    from server.structured.schema_support import analyze_schema, normalize_schema

    out = {}
    for c in cases:
        schema = normalize_schema(c.schema) if normalize and isinstance(c.schema, dict) else c.schema
        ok = isinstance(schema, bool) or not analyze_schema(schema, strict_mode=strict_mode).strict_problems()
        out[c.name] = ok
    return out


def _cases(suite: str, per_file: int | None) -> Iterator[Case]:
    if suite in ("test-suite", "all"):
        yield from load_test_suite(per_file=per_file)
    if suite in ("bench", "all"):
        yield from load_bench(per_subset=per_file)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--suite", choices=("test-suite", "bench", "all"), default="all")
    p.add_argument("--strict-mode", choices=("true", "false", "both"), default="both")
    p.add_argument("--normalize", action="store_true", help="apply server.schema_support.normalize_schema first")
    p.add_argument("--per-file", type=int, default=None, help="deterministic sample size per file / subset")
    a = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    cases = list(_cases(a.suite, a.per_file))
    modes = {"true": [True], "false": [False], "both": [False, True]}[a.strict_mode]
    report: dict[str, Any] = {"xgrammar": _XGR_VERSION, "cases": len(cases), "normalize": a.normalize, "modes": {}}
    t0 = time.monotonic()
    for mode in modes:
        strict_ok = strict_acceptance(cases, strict_mode=mode, normalize=a.normalize)
        results = [evaluate_case(c, strict_mode=mode, normalize=a.normalize) for c in cases]
        agg = aggregate(results, strict_ok=strict_ok)
        agg["per_case"] = [
            dict(name=r.case.name, compiled=r.compiled, error=r.error, too_strict=r.too_strict,
                 too_loose=r.too_loose, order_only=r.order_only, strict_ok=strict_ok[r.case.name],
                 loose=r.loose_examples, strict=r.strict_examples)
            for r in results
        ]
        report["modes"][str(mode).lower()] = agg
        _print_table(agg, str(mode).lower())
    report["seconds"] = round(time.monotonic() - t0, 1)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "schema_keywords.json").write_text(json.dumps(report, indent=1, default=str))
    (a.out / "schema_keywords.md").write_text(render_markdown(report))
    print(f"\nwrote {a.out}/schema_keywords.json and .md in {report['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
