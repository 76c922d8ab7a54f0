"""CPU cost of preparing one chat request (render, tokenise, constraint checks) before the engine.

Runs :func:`server.plan.build_plan` in process (the scripted FakeEngine stands in
for the engine; the renderer, tokenizer and grammar checks are the real ones for the embedded
model) for requests with 0, 1, 8 and 32 tools and a json_schema request, and prints the
milliseconds per request the first time a tool set is seen (cold: schema checks run) and
when it is sent again (warm). The ``agent next turn`` row is the bench's agent transcript
turn by turn: each prompt is new, but all of it except the last user message was the
previous turn's prompt (what a real agent sends; cold there is the transcript's first turn).

``--long`` adds long agent transcripts (10 to 80 turns, each with a tool result of about 500
tokens: 6k to 47k prompt tokens): the milliseconds a next turn's plan takes warm (every earlier
message was seen the turn before), beside what transformers' ``apply_chat_template`` with
``tokenize=True`` takes on the same messages and template (how vLLM's server prepares a chat
prompt: the whole transcript rendered and tokenised again each turn).

    python -m bench.prepare_cost [--repeats 50] [--long]
"""
from __future__ import annotations

import argparse
import time
from typing import Any

__all__ = ["long_history", "main", "requests"]


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


def long_history(turns: int) -> list[dict[str, Any]]:
    """An agent transcript of ``turns`` turns (the bench's agent turns, cycled), each tool result
    carrying a log of about 500 tokens."""
    import json

    from bench.workloads import AGENT_SYSTEM, AGENT_TURNS

    log = " ".join(f"line {i}: the shipment record shows normal handling at depot {i % 7}." for i in range(30))
    msgs: list[dict[str, Any]] = [{"role": "system", "content": AGENT_SYSTEM}]
    for k in range(turns):
        user, tool, args, result, reply = AGENT_TURNS[k % len(AGENT_TURNS)]
        call = {"id": f"call_{k}", "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}
        msgs += [{"role": "user", "content": f"{user} ({k})"},
                 {"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": call["id"], "content": json.dumps({**result, "log": log})},
                 {"role": "assistant", "content": reply}]
    return msgs


def _long_rows(state: Any) -> None:
    """Next-turn plan cost on long transcripts, beside transformers' render and tokenise."""
    import transformers

    from bench.workloads import AGENT_TOOLS
    from chat_templates import builtin_template_path
    from server.default_model import ensure_default_model
    from server.plan import build_plan
    from server.protocol import ChatCompletionRequest

    tok = transformers.AutoTokenizer.from_pretrained(str(ensure_default_model(progress=False)))
    template = builtin_template_path("hermes").read_text()
    print("\n| transcript | messages | prompt tokens | gramserve next turn ms (warm) "
          "| transformers apply_chat_template ms | ratio |\n| --- | --- | --- | --- | --- | --- |")
    for turns in (10, 40, 80):
        times, body = [], {}
        for t in range(turns - 4, turns + 1):  # the turns before warm the pieces, as a live agent's would
            body = {"messages": long_history(t) + [{"role": "user", "content": "And next?"}],
                    "tools": AGENT_TOOLS, "tool_choice": "auto"}
            req = ChatCompletionRequest.model_validate(body)
            t0 = time.process_time()
            plan = build_plan(state, req)
            times.append((time.process_time() - t0) * 1000)
        t0 = time.process_time()
        for _ in range(3):
            tok.apply_chat_template(body["messages"], tools=AGENT_TOOLS, chat_template=template,
                                    add_generation_prompt=True, tokenize=True)
        hf = (time.process_time() - t0) * 1000 / 3
        ours = sum(times[1:]) / (len(times) - 1)
        print(f"| {turns} turns | {len(body['messages'])} | {len(plan.prompt_ids)} | {ours:.2f} | {hf:.1f} "
              f"| {ours / hf:.2f} |")


def main(argv: list[str] | None = None) -> None:
    from bench.workloads import _agent_bodies
    from server.plan import build_plan
    from server.protocol import ChatCompletionRequest

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--long", action="store_true", help="add long agent transcripts (6k-47k prompt tokens)")
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
    if args.long:
        _long_rows(state)


if __name__ == "__main__":
    main()
