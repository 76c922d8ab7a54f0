"""Tool-grammar compile time per real vocabulary: cold, warm (the server's cache), xgrammar's own cache.

For each vocabulary of bench/vocab_standin.py, with its family's call format, the tool grammar of 1, 16
and 128 tools (``tool_choice: required``) is built by the server's own code
(``server.structured.constraints.constraint_from_request``) and compiled through the server's own
``GrammarCache`` over the vocabulary's ``xgrammar.TokenizerInfo`` (built as the server builds it, with
the model's width):

- **info**: building the ``TokenizerInfo`` (once per server start);
- **cold**: the first compile, on a fresh cache and compiler;
- **next**: another tool set (other names) on the same, used compiler: a new request on a running server;
- **warm**: the same request again: a hit in the server's cache (``cached``), counted;
- **xgr cache**: the server's outcomes forgotten (``GrammarCache.close``), compiled again: xgrammar's
  compiler cache.

    .venv/bin/python -m bench.vocab_compile [--vocabs qwen3,llama3] [--tools 1,16,128] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

__all__ = ["FAMILY_OF_VOCAB", "make_tools", "measure", "main"]

# the family whose call format is compiled on each vocabulary (as in tests/e2e/test_real_vocab.py)
FAMILY_OF_VOCAB = {"qwen3": "hermes", "qwen3_5": "qwen3_coder", "deepseek_v4": "deepseek_v31", "llama3": "llama3_json",
                   "o200k_harmony": "gpt_oss", "tekken": "mistral"}


def make_tools(n: int, prefix: str = "tool") -> list[dict[str, Any]]:
    """``n`` distinct function tools, each with a string, a bounded integer, an enum and an optional array."""
    return [{"type": "function", "function": {
        "name": f"{prefix}_{i}", "description": f"Tool number {i}.",
        "parameters": {"type": "object", "additionalProperties": False, "required": ["query", "count", "mode"],
                       "properties": {"query": {"type": "string", "maxLength": 64},
                                      "count": {"type": "integer", "minimum": 0, "maximum": 100 + i},
                                      "mode": {"type": "string", "enum": ["fast", "slow", f"mode_{i}"]},
                                      "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}}}}}
            for i in range(n)]


def _hf_tokenizer(vocab: str) -> tuple[Any, int]:
    """The vocabulary as a transformers fast tokenizer (as vLLM loads a folder's), and the model width."""
    from transformers import PreTrainedTokenizerFast

    from bench.vocab_standin import build_tokenizer

    built = build_tokenizer(vocab)
    tok = PreTrainedTokenizerFast(tokenizer_object=built.tokenizer, eos_token=built.eos, bos_token=built.bos)
    return tok, built.vocab_size


def measure(vocab: str, counts: list[int], repeats: int) -> list[dict[str, Any]]:
    """One row per tool count: median seconds over ``repeats`` of each phase, and the warm hits."""
    from server.structured.constraints import constraint_from_request
    from server.structured.tools import tool_spec_of
    from server.structured.grammar_cache import GrammarCache, tokenizer_info_from_hf

    tok, width = _hf_tokenizer(vocab)
    t0 = time.perf_counter()
    info = tokenizer_info_from_hf(tok, vocab_size=width)
    info_s = time.perf_counter() - t0
    family = FAMILY_OF_VOCAB[vocab]
    rows = []
    for n in counts:
        constraint = constraint_from_request(response_format=None, structured_outputs=None,
                                             tools=tool_spec_of(make_tools(n), "required"), tool_format=family)
        other = constraint_from_request(response_format=None, structured_outputs=None,
                                        tools=tool_spec_of(make_tools(n, "other"), "required"), tool_format=family)
        assert constraint is not None and other is not None
        cold, nxt, warm, xgr_cached, hits = [], [], [], [], 0
        for _ in range(repeats):
            cache = GrammarCache(info, disable_any_whitespace=True, compile_timeout_s=600)  # as the server's
            first = cache.compile(constraint)
            if not first.ok or first.cached:
                raise RuntimeError(f"{vocab} / {n} tools: {first}")
            cold.append(first.seconds)
            nxt.append(cache.compile(other).seconds)
            t = time.perf_counter()
            again = cache.compile(constraint)
            warm.append(time.perf_counter() - t)
            hits += again.cached
            cache.close()  # the server's outcomes forgotten; xgrammar's compiler keeps its own cache
            third = cache.compile(constraint)
            if third.cached:
                raise RuntimeError("GrammarCache.close() kept the outcome")
            xgr_cached.append(third.seconds)
        rows.append({"vocab": vocab, "family": family, "tokens": width, "info_s": info_s, "tools": n,
                     "cold_s": statistics.median(cold), "next_s": statistics.median(nxt), "warm_s": statistics.median(warm),
                     "xgr_s": statistics.median(xgr_cached), "hits": hits, "repeats": repeats})
    return rows


def main(argv: list[str] | None = None) -> None:
    from bench.vocab_standin import VOCABS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocabs", default=",".join(VOCABS))
    ap.add_argument("--tools", default="1,16,128")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.tools.split(",")]
    print("| vocabulary | family | width | TokenizerInfo s | tools | cold ms | next ms | warm (server cache) ms | warm hits "
          "| xgrammar cache ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for vocab in args.vocabs.split(","):
        for r in measure(vocab, counts, args.repeats):
            print(f"| {r['vocab']} | {r['family']} | {r['tokens']:,} | {r['info_s']:.2f} | {r['tools']} "
                  f"| {r['cold_s'] * 1e3:.1f} | {r['next_s'] * 1e3:.1f} | {r['warm_s'] * 1e3:.3f} | {r['hits']}/{r['repeats']} "
                  f"| {r['xgr_s'] * 1e3:.1f} |", flush=True)


if __name__ == "__main__":
    main()
