"""Budget-aware closing against a running server: valid answers at a tight budget, closing on and off.

For each strict ``json_schema`` (JSONSchemaBench subsets) and each required BFCL tool call, the
answer is first written with room to spare (closing off, ``max_tokens`` 512) to learn its natural
length N in tokens. Then it is asked again at 1/4, 1/2 and 3/4 of N, once with closing (the
default) and once with ``"close_within_budget": false``, alternating streamed and non-streamed,
and each answer is scored: it parses and fits the schema (JSON), or every call is complete with
arguments that fit the tool (calls). A closed request whose budget is below the shortest answer
is a 400 (counted as "refused": the client is told the minimum instead of receiving a cut answer).

Usage::

    python -m evals.budget_close --base-url http://127.0.0.1:8000/v1 [--subsets Github_easy ...]
        [--limit 8] [--tools 8] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jsonschema

from evals.data import testdata_root
from evals.jsonschemabench import build_prompt, check_output, load_subset

__all__ = ["Outcome", "main", "run"]

FRACTIONS = (0.25, 0.5, 0.75)


@dataclass
class Outcome:
    kind: str  # "json" | "call"
    name: str
    natural: int
    budget: int
    closing: bool
    stream: bool
    status: str  # "valid" | "cut" | "invalid" | "refused"
    finish: str | None = None
    marked: bool = False


def _json_request(model: str, schema: Any, prompt: str) -> dict[str, Any]:
    return {"model": model, "temperature": 0, "messages": [{"role": "user", "content": prompt}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema,
                                                                        "strict": True}}}


def _call_request(model: str, question: dict[str, Any]) -> dict[str, Any]:
    return {"model": model, "temperature": 0, "messages": question["messages"], "tools": question["tools"],
            "tool_choice": "required", "parallel_tool_calls": False}


def _send(client: Any, body: dict[str, Any], *, stream: bool) -> tuple[str | None, list[tuple[str, str]], str | None,
                                                                          bool, int]:
    """(content, calls as (name, arguments), finish, closed_by_budget, completion tokens)."""
    kw = {k: v for k, v in body.items() if k not in ("close_within_budget",)}
    extra = {"close_within_budget": body["close_within_budget"]} if "close_within_budget" in body else None
    if not stream:
        r = client.chat.completions.create(extra_body=extra, **kw)
        c = r.choices[0]
        calls = [(t.function.name, t.function.arguments) for t in c.message.tool_calls or []]
        return (c.message.content, calls, c.finish_reason, bool((c.model_extra or {}).get("closed_by_budget")),
                r.usage.completion_tokens if r.usage else 0)
    content, calls, finish, marked, used = "", {}, None, False, 0
    for ch in client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                             extra_body=extra, **kw):
        if ch.usage:
            used = ch.usage.completion_tokens
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        content += d.content or ""
        for t in d.tool_calls or []:
            name, args = calls.get(t.index, ("", ""))
            calls[t.index] = (name + ((t.function.name or "") if t.function else ""),
                              args + ((t.function.arguments or "") if t.function else ""))
        if ch.choices[0].finish_reason:
            finish = ch.choices[0].finish_reason
            marked = bool((ch.choices[0].model_extra or {}).get("closed_by_budget"))
    return content, [calls[i] for i in sorted(calls)], finish, marked, used


def _score_json(content: str | None, schema: Any, finish: str | None) -> str:
    parsed, valid, _ = check_output(content, schema)
    return "valid" if valid else ("cut" if finish == "length" and not parsed else "invalid")


def _score_calls(calls: list[tuple[str, str]], tools: list[dict[str, Any]], finish: str | None) -> str:
    schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
    if not calls:
        return "cut" if finish == "length" else "invalid"
    for name, args in calls:
        try:
            value = json.loads(args)
        except ValueError:
            return "cut" if finish == "length" else "invalid"
        if name not in schemas or list(jsonschema.Draft202012Validator(schemas[name]).iter_errors(value)):
            return "invalid"
    return "valid"


def _one(client: Any, kind: str, name: str, body: dict[str, Any], check: Any, *, flip: list[bool]) -> list[Outcome]:
    import openai

    content, calls, finish, _, natural = _send(client, {**body, "max_tokens": 512, "close_within_budget": False},
                                               stream=False)
    if finish == "length" or natural < 8:
        return []  # no natural length to take fractions of
    out = []
    for fraction in FRACTIONS:
        budget = max(1, round(natural * fraction))
        for closing in (True, False):
            flip[0] = not flip[0]
            req = {**body, "max_tokens": budget, **({} if closing else {"close_within_budget": False})}
            try:
                content, calls, finish, marked, _ = _send(client, req, stream=flip[0])
            except openai.BadRequestError as exc:
                code = (exc.body or {}).get("code") if isinstance(exc.body, dict) else None
                out.append(Outcome(kind, name, natural, budget, closing, flip[0],
                                   "refused" if code == "max_tokens_too_small" else "invalid"))
                continue
            status = check(content, calls, finish)
            out.append(Outcome(kind, name, natural, budget, closing, flip[0], status, finish, marked))
    return out


def run(*, base_url: str, api_key: str, model: str | None, data: Path, subsets: list[str], limit: int,
        tools: int) -> list[Outcome]:
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=api_key, timeout=600, max_retries=0)
    model = model or client.models.list().data[0].id
    flip = [False]
    out: list[Outcome] = []
    for subset in subsets:
        for item in load_subset(data / "jsonschemabench", subset, limit=limit):
            body = _json_request(model, item.schema, build_prompt(item.schema))
            try:
                out += _one(client, "json", item.name, body,
                            lambda c, _k, f, s=item.schema: _score_json(c, s, f), flip=flip)
            except Exception as exc:  # noqa: BLE001 - a schema the server refuses: not part of this measure
                print(f"skip {item.name}: {type(exc).__name__}: {str(exc)[:120]}", file=sys.stderr)
    lines = (data / "bfcl" / "simple_python.jsonl").read_text().splitlines()[:tools]
    for line in lines:
        q = json.loads(line)
        out += _one(client, "call", q["id"], _call_request(model, q),
                    lambda _c, k, f, t=q["tools"]: _score_calls(k, t, f), flip=flip)
    return out


def table(outcomes: list[Outcome]) -> str:
    rows = ["| answers | closing | asked | valid | of which marked closed_by_budget | cut | invalid | refused (400) |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for kind in ("json", "call"):
        for closing in (True, False):
            sel = [o for o in outcomes if o.kind == kind and o.closing == closing]
            if not sel:
                continue
            n = len(sel)
            count = {s: sum(o.status == s for o in sel) for s in ("valid", "cut", "invalid", "refused")}
            marked = sum(o.marked for o in sel if o.status == "valid")
            rows.append(f"| {kind} | {'on' if closing else 'off'} | {n} | {count['valid']} ({count['valid'] / n:.0%}) "
                        f"| {marked} | {count['cut']} | {count['invalid']} | {count['refused']} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    p.add_argument("--api-key", default="EMPTY")
    p.add_argument("--model")
    p.add_argument("--data", type=Path, default=testdata_root())
    p.add_argument("--subsets", nargs="+", default=["Github_trivial", "Github_easy", "Glaiveai2K"])
    p.add_argument("--limit", type=int, default=4)
    p.add_argument("--tools", type=int, default=8)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    outcomes = run(base_url=a.base_url, api_key=a.api_key, model=a.model, data=a.data, subsets=a.subsets,
                   limit=a.limit, tools=a.tools)
    text = table(outcomes)
    print(text)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "budget_close.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
        (a.out / "budget_close.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
