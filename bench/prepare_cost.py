"""CPU cost of preparing one chat request (render, tokenise, constraint checks) before the engine.

Runs :func:`server.plan.build_plan` in process (the scripted FakeEngine stands in
for the engine; the renderer, tokenizer and grammar checks are the real ones for the embedded
model) for requests with 0, 1, 8 and 32 tools and a json_schema request, and prints the
milliseconds per request the first time a tool set is seen (cold: schema checks run) and
when it is sent again (warm). The ``agent next turn`` row is the bench's agent transcript
turn by turn: each prompt is new, but all of it except the last user message was the
previous turn's prompt (what a real agent sends; cold there is the transcript's first turn).

    python -m bench.prepare_cost [--repeats 50]
"""
from __future__ import annotations

import argparse
import time
from typing import Any

__all__ = ["main", "requests"]


def _tool(i: int, salt: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": f"tool_{i}", "description": f"Does thing {i} ({salt}).",
        "parameters": {"type": "object", "additionalProperties": False, "required": ["city"],
                       "properties": {"city": {"type": "string", "maxLength": 40},
                                      "days": {"type": "integer", "minimum": 1, "maximum": 14},
                                      "unit": {"enum": ["c", "f"]}, "note": {"type": "string"}}}}}


def requests(salt: str) -> dict[str, dict[str, Any]]:
    """Request bodies by name; ``salt`` makes the schemas new (cold) for each run."""
    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the weather in Paris for the next three days?"}]
    out: dict[str, dict[str, Any]] = {"plain": {"messages": msgs}}
    for n in (1, 8, 32):
        out[f"tools x{n}"] = {"messages": msgs, "tools": [_tool(i, salt) for i in range(n)], "tool_choice": "auto"}
    out["json_schema"] = {"messages": msgs, "response_format": {"type": "json_schema", "json_schema": {
        "name": "w", "strict": True, "schema": _tool(0, salt)["function"]["parameters"]}}}
    return out


def _state() -> Any:
    import transformers

    from server.chat.render import ChatRenderer
    from server.config import Settings
    from server.default_model import ensure_default_model
    from server.engine.fake import FakeEngine
    from server.state import ServerState
    from server.structured.grammar_cache import GrammarCache, tokenizer_info_from_hf
    from tool_parsers import get_tool_parser

    model = ensure_default_model(progress=False)
    tok = transformers.AutoTokenizer.from_pretrained(str(model))
    cache = GrammarCache(lambda: tokenizer_info_from_hf(tok), max_entries=64, compile_timeout_s=120)
    return ServerState(settings=Settings(), engine=FakeEngine(max_model_len=1 << 20, tokenizer=tok),
                       grammar_cache=cache,
                       renderer=ChatRenderer.from_model(model_dir_or_tokenizer=str(model), chat_template="hermes"),
                       tool_parser=get_tool_parser("hermes"))


def main(argv: list[str] | None = None) -> None:
    from server.plan import build_plan
    from bench.workloads import _agent_bodies
    from server.protocol import ChatCompletionRequest

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args(argv)
    state = _state()
    print("| request | cold ms (first time) | warm ms (per request, CPU) |\n| --- | --- | --- |")
    for name, body in requests(salt=str(time.time_ns())).items():
        req = ChatCompletionRequest.model_validate(body)
        t0 = time.process_time()
        build_plan(state, req)
        cold = (time.process_time() - t0) * 1000
        t0 = time.process_time()
        for _ in range(args.repeats):
            build_plan(state, req)
        warm = (time.process_time() - t0) * 1000 / args.repeats
        print(f"| {name} | {cold:.1f} | {warm:.2f} |")
    turns = [ChatCompletionRequest.model_validate(b) for b in _agent_bodies()]
    times = []
    for req in turns:
        t0 = time.process_time()
        build_plan(state, req)
        times.append((time.process_time() - t0) * 1000)
    print(f"| agent next turn ({len(turns)} turns) | {times[0]:.1f} | {sum(times[1:]) / (len(times) - 1):.2f} |")


if __name__ == "__main__":
    main()
