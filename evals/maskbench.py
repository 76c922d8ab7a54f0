"""MaskBench coverage of strict JSON Schema enforcement: passing / refused / too strict / too loose.

MaskBench (guidance-ai/jsonschemabench, ``maskbench/data/``) holds real JSON Schemas with
labelled valid and invalid instances. For each schema this sends a strict
``response_format: json_schema`` down the server's own request path (``from_request.build``:
caps, meta-schema, ``schema_plan.decide_schema``, the backend choice) and feeds every labelled
instance to the grammar the engine would run, on the backend it was given:

* **passing**: the request is accepted, every valid instance is accepted and every invalid one
  rejected;
* **refused**: a 400 (its keywords and pointers are counted);
* **valid rejected** (too strict): accepted, but some valid instance cannot be written;
* **too loose**: accepted, and some invalid instance gets through (the promise broken); each valid
  instance is also tried with a raw tab in place of one string character, which is not JSON.

An instance is tried as compact JSON in its own key order and in the schema's property order
(both grammars fix property order), with integral floats as integers. Two reference columns
run in the same pass: XGrammar alone (the request path with llguidance switched off) and
llguidance alone (its default options on the raw schema). It also checks that the schema check
(``schema_check.check_schema_report``) gives the request's verdict, and times cold compiles over
a real vocabulary (the served model's tokenizer, SmolLM2's by default).

Usage::

    python -m evals.maskbench [--data FILE.jsonl.gz | FOLDER] [--limit N] [--workers 2]
        [--compile-sample 150] [--tokenizer DIR] [--out DIR]

Writes ``maskbench.json``, ``maskbench.md`` and ``maskbench.png`` to --out (default
``evals/out/maskbench``). The dev half takes about 4 minutes on 2 cores. ``--data
tests/data/json_schema_test_suite/draft2020-12`` judges the official test suite's 383 cases the
same way (a few seconds; its instances probe each keyword's edges).
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import signal
import sys
import time
from collections import Counter, defaultdict
from multiprocessing import Pool
from pathlib import Path
from typing import Any

from evals.data import testdata_root
from evals.schema_keywords import serialisations

__all__ = ["ENGINES", "Outcome", "judge_schema", "load", "main", "subset_of", "summarize", "markdown"]

ENGINES = ("gramserve", "xgrammar_alone", "llguidance_alone")
Outcome = str  # "passing" | "refused" | "valid_rejected" | "too_loose" | "timeout"
PER_SCHEMA_S = 30  # a schema that takes longer counts as a timeout (none does on the dev half)


def load(path: Path, *, limit: int | None = None) -> list[dict[str, Any]]:
    """The records of a MaskBench jsonl(.gz) file, or of a folder of JSON-Schema-Test-Suite keyword
    files (``tests/data/json_schema_test_suite/draft2020-12``: each case a record ``<keyword>#<i>``),
    evenly spaced down to ``limit``."""
    if path.is_dir():
        records = [{"id": f"{f.stem}#{i}", "description": case["description"], "schema": case["schema"],
                    "tests": case["tests"]}
                   for f in sorted(path.glob("*.json")) for i, case in enumerate(json.loads(f.read_text("utf-8")))]
    else:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
            records = [json.loads(line) for line in f if line.strip()]
    if limit and limit < len(records):
        step = len(records) / limit
        records = [records[int(i * step)] for i in range(limit)]
    return records


def subset_of(record_id: str) -> str:
    """The MaskBench subset of a record id (``Github_hard---o1234.json`` -> ``Github_hard``); a test-suite
    case's keyword file (``oneOf#3`` -> ``oneOf``)."""
    head = record_id.split("---")[0].split("#")[0].removesuffix(".json")
    return re.sub(r"_\d+$", "", head) if head.startswith(("BFCL", "JME")) else head


# --- matchers at string level -----------------------------------------------------------------

_XGR: Any = None
_BYTES: Any = None


def _xgrammar_accepts(constraint: Any) -> Any:
    """A text -> bool for ``constraint`` compiled as vLLM's XGrammar backend compiles it here
    (``grammar_cache.compile_constraint``, compact JSON)."""
    import xgrammar as xgr

    from server.structured.grammar_cache import compile_constraint

    global _XGR
    if _XGR is None:
        _XGR = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)
    compiled = compile_constraint(_XGR, constraint, disable_any_whitespace=True)
    matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)

    def accepts(text: str) -> bool:
        matcher.reset()
        return bool(matcher.accept_string(text)) and matcher.is_terminated()

    return accepts


def _llguidance_accepts(schema: Any) -> Any:
    """A text -> bool for ``schema`` as llguidance compiles it (compact JSON), byte by byte."""
    import llguidance as llg

    global _BYTES
    if _BYTES is None:
        _BYTES = llg.LLTokenizer("byte")
    grammar = llg.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults={"whitespace_flexible": False})
    error = llg.LLMatcher.validate_grammar(grammar, _BYTES)
    if error:
        raise ValueError(error)

    def accepts(text: str) -> bool:
        m = llg.LLMatcher(_BYTES, grammar, log_level=0)
        return bool(m.consume_tokens(_BYTES.tokenize_bytes(text.encode("utf-8")))) and m.is_accepting() \
            and not m.is_error()

    return accepts


def _texts(data: Any, schema: Any) -> list[str]:
    """Compact texts of ``data``: own and schema key order; integral floats as integers except
    under drafts 3 and 4, where ``1.0`` is not an integer."""
    variants = serialisations(data, schema)
    if isinstance(schema, dict) and re.search(r"draft-0[34]", str(schema.get("$schema", ""))):
        variants = {k: v for k, v in variants.items() if not k.endswith("_int")}
    out = []
    for text in variants.values():
        compact = json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
        if compact not in out:
            out.append(compact)
    return out


_RAW = "\ue000"  # a private-use character no instance holds: where the raw control character goes


def _first_string_marked(data: Any) -> Any:
    """``data`` with the first character of its first non-empty string value (not a key) made
    :data:`_RAW`, or None when it holds none."""
    if isinstance(data, str):
        return _RAW + data[1:] if data else None
    items = list(data.items()) if isinstance(data, dict) else list(enumerate(data)) if isinstance(data, list) else []
    for key, value in items:
        marked = _first_string_marked(value)
        if marked is not None:
            out = dict(data) if isinstance(data, dict) else list(data)
            out[key] = marked
            return out
    return None


def _raw_control_texts(data: Any, schema: Any) -> list[str]:
    """A valid instance's texts with a raw tab in place of one string character (the length kept):
    not JSON (RFC 8259 forbids raw control characters in strings, ``json.loads`` refuses them), so
    no grammar may write them. XGrammar's length-bounded strings did (mlc-ai/xgrammar#800)."""
    marked = _first_string_marked(data)
    return [] if marked is None else [t.replace(_RAW, "\t") for t in _texts(marked, schema)]


def _instances(accepts: Any, record: dict[str, Any]) -> tuple[int, int]:
    """(valid instances rejected, invalid instances accepted); a valid instance written with a raw
    control character in a string (:func:`_raw_control_texts`) is an invalid one."""
    rejected = loose = 0
    for test in record["tests"]:
        got = any(accepts(t) for t in _texts(test["data"], record["schema"]))
        rejected += bool(test["valid"] and not got)
        loose += bool(not test["valid"] and got)
        if test["valid"]:
            loose += any(accepts(t) for t in _raw_control_texts(test["data"], record["schema"]))
    return rejected, loose


def _classify(rejected: int, loose: int) -> Outcome:
    return "too_loose" if loose else "valid_rejected" if rejected else "passing"


# --- one schema -----------------------------------------------------------------------------

def _request(schema: Any, *, guidance: bool) -> dict[str, Any]:
    """The strict request's outcome on the server's path: backend and schema, or its 400."""
    from server.errors import APIError
    from server.structured.from_request import build
    from server.structured.spec import ConstraintSpec

    spec = ConstraintSpec(response_format={"type": "json_schema", "json_schema": {"schema": schema, "strict": True}},
                          guidance=guidance)
    start = time.perf_counter()
    try:
        built = build(spec)
    except APIError as exc:
        return {"refused": True, "message": exc.message, "gate_s": time.perf_counter() - start,
                "keywords": _refusal_keywords(exc.message)}
    c = built.constraint
    assert c is not None and c.kind in ("json", "structural_tag"), c  # a tag where vLLM's json check refuses
    return {"refused": False, "backend": c.backend, "constraint": c, "gate_s": time.perf_counter() - start}


def _refusal_keywords(message: str) -> list[str]:
    return sorted(set(re.findall(r"(?:^|; |: )(\$?[A-Za-z]+) at /", message)))


def _agrees(schema: Any, request: dict[str, Any]) -> bool:
    """The schema check's strict verdict and backend are the request's."""
    from server.structured.schema_check import check_schema_report

    report = check_schema_report({"schema": schema}, cache=_NoCompile())["items"][0]
    if request["refused"]:
        return not report["strict_ok"]
    return bool(report["strict_ok"]) and report["backend"] == request["backend"]


class _NoCompile:
    """The check's cache stand-in: compiling is timed separately, and agreement is about the verdict."""

    def compile(self, constraint: Any) -> Any:
        from server.structured.grammar_cache import CompileResult

        return CompileResult(True, 0.0, False, None)


def judge_schema(record: dict[str, Any]) -> dict[str, Any]:
    """Every engine's outcome on one record (see the module docstring)."""
    signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(PER_SCHEMA_S)
    row: dict[str, Any] = {"id": record["id"], "subset": subset_of(record["id"])}
    try:
        for engine, guidance in (("gramserve", True), ("xgrammar_alone", False)):
            req = _request(record["schema"], guidance=guidance)
            row[f"{engine}_gate_s"] = req["gate_s"]
            if req["refused"]:
                row[engine], row[f"{engine}_keywords"] = "refused", req["keywords"]
                if engine == "gramserve":
                    row["refusal"] = req["message"][:600]
            else:
                c = req["constraint"]
                accepts = _llguidance_accepts(c.value) if c.backend == "llguidance" else _xgrammar_accepts(c)
                row[engine] = _classify(*_instances(accepts, record))
                row[f"{engine}_backend"] = req["backend"]
            if engine == "gramserve":
                row["check_agrees"] = _agrees(record["schema"], req)
        try:
            row["llguidance_alone"] = _classify(*_instances(_llguidance_accepts(record["schema"]), record))
        except Exception:  # noqa: BLE001 - llguidance refuses the schema
            row["llguidance_alone"] = "refused"
    except _Timeout:
        for engine in ENGINES:
            row.setdefault(engine, "timeout")
    finally:
        signal.alarm(0)
    return row


class _Timeout(Exception):
    pass


def _timeout(signum: int, frame: Any) -> None:
    raise _Timeout


# --- compile time over a real vocabulary ------------------------------------------------------

def compile_times(records: list[dict[str, Any]], *, tokenizer_dir: str) -> dict[str, list[float]]:
    """Cold compile seconds per accepted schema on the backend the request chose, over the real
    vocabulary of ``tokenizer_dir``: XGrammar's full compile (token masks precomputed), and
    llguidance's matcher plus its first mask (it builds the rest lazily, while generating)."""
    import llguidance as llg
    import llguidance.hf as llg_hf
    import xgrammar as xgr
    from transformers import AutoTokenizer

    from server.structured.grammar_cache import compile_constraint

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    info = xgr.TokenizerInfo.from_huggingface(tok)
    compiler = xgr.GrammarCompiler(info, max_threads=2, cache_enabled=False)
    ll_tok = llg_hf.from_tokenizer(tok)
    times: dict[str, list[float]] = defaultdict(list)
    for record in records:
        req = _request(record["schema"], guidance=True)
        if req["refused"]:
            continue
        c = req["constraint"]
        start = time.perf_counter()
        if c.backend == "xgrammar":
            compile_constraint(compiler, c, disable_any_whitespace=True)
        else:
            grammar = llg.LLMatcher.grammar_from_json_schema(c.text,
                                                             defaults={"whitespace_flexible": False})
            matcher = llg.LLMatcher(ll_tok, grammar, log_level=0)
            matcher.compute_bitmask()
        times[req["backend"]].append(time.perf_counter() - start)
    return dict(times)


# --- summary --------------------------------------------------------------------------------

def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts per engine (overall and per subset), backends, refusal keywords, agreement, gate times."""
    out: dict[str, Any] = {"schemas": len(rows), "engines": {}, "subsets": {}}
    for engine in ENGINES:
        out["engines"][engine] = dict(Counter(r[engine] for r in rows))
    by_subset: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_subset[r["subset"]].append(r)
    for name, rs in sorted(by_subset.items()):
        out["subsets"][name] = {e: dict(Counter(r[e] for r in rs)) for e in ENGINES} | {"schemas": len(rs)}
    out["backends"] = dict(Counter(r.get("gramserve_backend") for r in rows if r["gramserve"] != "refused"))
    out["refusal_keywords"] = dict(Counter(k for r in rows for k in r.get("gramserve_keywords", ())).most_common(20))
    out["check_disagrees"] = [r["id"] for r in rows if not r.get("check_agrees", True)]
    out["too_loose"] = {e: [r["id"] for r in rows if r[e] == "too_loose"] for e in ENGINES}
    gates = [r["gramserve_gate_s"] for r in rows if "gramserve_gate_s" in r]
    out["gate_ms"] = {q: round(1000 * (_pct(gates, p) or 0), 2) for q, p in (("p50", .5), ("p90", .9), ("p99", .99))}
    return out


def markdown(summary: dict[str, Any]) -> str:
    n = summary["schemas"]
    lines = ["| engine | passing | refused | valid instance rejected | **too loose** |", "| --- | ---: | ---: | ---: | ---: |"]
    for e in ENGINES:
        c = summary["engines"][e]
        lines.append(f"| {e} | {c.get('passing', 0):,} ({100 * c.get('passing', 0) / max(n, 1):.1f}%) | "
                     f"{c.get('refused', 0):,} | {c.get('valid_rejected', 0):,} | **{c.get('too_loose', 0)}** |")
    lines += ["", "| subset | schemas | " + " | ".join(f"{e} pass / refused / strict / loose" for e in ENGINES) + " |",
              "| --- | ---: | " + " | ".join("---" for _ in ENGINES) + " |"]
    for name, s in summary["subsets"].items():
        cells = [f"{s[e].get('passing', 0)} / {s[e].get('refused', 0)} / {s[e].get('valid_rejected', 0)} / "
                 f"{s[e].get('too_loose', 0)}" for e in ENGINES]
        lines.append(f"| {name} | {s['schemas']} | " + " | ".join(cells) + " |")
    lines += ["", f"Backends chosen by gramserve: {summary['backends']}",
              f"Refusals by keyword (gramserve): {summary['refusal_keywords']}",
              f"Check / request disagreements: {len(summary['check_disagrees'])}",
              f"Request gate: {summary['gate_ms']} ms"]
    if "compile" in summary:
        lines.append("")
        lines.append("| backend (cold, real vocabulary) | schemas | p50 ms | p90 ms | p99 ms | max ms |")
        lines.append("| --- | ---: | ---: | ---: | ---: | ---: |")
        for backend, c in summary["compile"].items():
            lines.append(f"| {backend} | {c['n']} | {c['p50']} | {c['p90']} | {c['p99']} | {c['max']} |")
    return "\n".join(lines) + "\n"


def _plot(summary: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - the plot is optional
        return
    kinds = ("passing", "valid_rejected", "refused", "too_loose")
    colors = ("#2a9d8f", "#e9c46a", "#adb5bd", "#e63946")
    fig, ax = plt.subplots(figsize=(8, 3.4))
    for i, e in enumerate(ENGINES):
        left = 0
        for kind, color in zip(kinds, colors, strict=True):
            v = summary["engines"][e].get(kind, 0)
            ax.barh(i, v, left=left, color=color, label=kind if i == 0 else None)
            left += v
    ax.set_yticks(range(len(ENGINES)), ENGINES)
    ax.set_xlabel(f"schemas (of {summary['schemas']})")
    ax.set_title("MaskBench, strict json_schema: outcome per schema")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=len(kinds), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=testdata_root() / "maskbench-dev.jsonl.gz",
                   help="a MaskBench .jsonl(.gz), or a folder of JSON-Schema-Test-Suite keyword files")
    p.add_argument("--limit", type=int, default=None, help="evenly spaced sample of N schemas")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--compile-sample", type=int, default=150, help="schemas timed over the real vocabulary (0: skip)")
    p.add_argument("--tokenizer", default=None, help="HF tokenizer folder (default: the embedded SmolLM2)")
    p.add_argument("--out", type=Path, default=Path("evals/out/maskbench"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.data.exists():
        print(f"no MaskBench file at {args.data} (pass --data)", file=sys.stderr)
        return 2
    records = load(args.data, limit=args.limit)
    start = time.perf_counter()
    with Pool(args.workers) as pool:
        rows = list(pool.imap_unordered(judge_schema, records, chunksize=8))
    summary = summarize(rows)
    summary["seconds"] = round(time.perf_counter() - start, 1)
    if args.compile_sample:
        tokenizer = args.tokenizer or _default_tokenizer()
        step = max(1, len(records) // args.compile_sample)
        times = compile_times(records[::step][:args.compile_sample], tokenizer_dir=tokenizer)
        summary["compile"] = {b: {"n": len(v), **{q: round(1000 * (_pct(v, p) or 0), 1) for q, p in
                                                   (("p50", .5), ("p90", .9), ("p99", .99), ("max", 1.0))}}
                              for b, v in times.items()}
        summary["compile_tokenizer"] = tokenizer
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "maskbench.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    (args.out / "maskbench.md").write_text(markdown(summary))
    _plot(summary, args.out / "maskbench.png")
    print(markdown(summary))
    print(f"{len(rows)} schemas in {summary['seconds']} s; wrote {args.out}/maskbench.{{json,md,png}}")
    return 0


def _default_tokenizer() -> str:
    from server.default_model import ensure_default_model

    return str(ensure_default_model())


if __name__ == "__main__":
    raise SystemExit(main())
