"""Settings: each option declared once, as a field of :class:`Settings`.

A field's metadata (made by :func:`option`) gives its flag, help and parsing; the argparse
parser, the environment variables and the defaults all come from that one declaration.
Flags are named like ``vllm serve``'s where they mean the same thing. Every flag can also
come from an environment variable ``GRAMSERVE_<FLAG>`` (``--max-model-len`` ->
``GRAMSERVE_MAX_MODEL_LEN``), which is how the container images are configured; a flag on
the command line wins over the environment.

Two environment variables are not options, because they are read where no Settings exist:

- ``GRAMSERVE_HOME``: where converted models are kept (``~/.cache/gramserve``); read by
  ``server/default_model.py``, which ``gramserve prepare-model`` runs before any server.
- ``GRAMSERVE_ENGINE_PLUGIN`` (``server/engine/vllm_plugin.py``): set by ``gramserve serve`` for
  vLLM's engine processes, which load the plugin before any gramserve code runs; ``0`` turns the
  low-priority grammar compile off.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["MAX_SCHEMA_DEPTH", "Settings", "option", "build_parser", "settings_from_args", "is_cpu_only", "env_name"]

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"

_T = TypeVar("_T")


def option(default: _T, help: str, *, flag: str | None = None, type: Callable[[str], _T] | None = None,
           action: str | None = None, short: str | None = None, choices: tuple[str, ...] | None = None) -> _T:
    """A settings field with its command-line flag (default ``--field-name``) and help.

    ``action``: ``store_true`` (a switch), ``store_false`` (a ``--no-...`` switch), ``append``
    (repeatable, collected into a tuple); otherwise a value parsed with ``type``.
    """
    meta = {"help": help, "flag": flag, "type": type, "action": action, "short": short, "choices": choices}
    return dataclasses.field(default=default, metadata={"option": meta})


# vLLM refuses JSON nested deeper (vllm.sampling_params): the one ceiling on schema depth
MAX_SCHEMA_DEPTH = 64


def _schema_depth(value: str) -> int:
    number = int(value)
    if not 1 <= number <= MAX_SCHEMA_DEPTH:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_SCHEMA_DEPTH} (vLLM's own limit), not {number}")
    return number


def _at_least_one(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {number}")
    return number


@dataclass(frozen=True)
class Settings:
    model: str | None = option(None, "HF folder or hub id (default: the embedded SmolLM2-135M-Instruct)")
    served_model_name: str | None = option(None, "name clients pass as 'model' (default: derived from --model)")
    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(8000, "port to listen on", type=int)
    api_keys: tuple[str, ...] = option((), "accepted bearer key; repeat for several", flag="--api-key",
                                       action="append")
    api_key_file: str | None = option(None, "file with one API key per line (added to --api-key)")
    metrics_require_auth: bool = option(False, "require an API key on /metrics too", action="store_true")
    chat_template: str | None = option(None, "Jinja file, inline Jinja, or a built-in template's name")
    tool_call_parser: str | None = option(
        "auto", "tool-call family in vLLM's spelling ({tool_parsers}: see docs/tool_calling.md), auto (from "
        "the chat template) or none")
    reasoning_parser: str | None = option(
        "auto", "reasoning parser in vLLM's spelling ({reasoning_parsers}), auto (the tool-call family's, "
        "when the chat template thinks) or none")
    reasoning_field: str = option("reasoning_content", "where reasoning goes in messages",
                                  choices=("reasoning_content", "reasoning", "both"))
    reasoning_required: bool = option(
        False, "with --reasoning-parser: the grammar makes the model write the think block before any answer",
        action="store_true")
    max_reasoning_tokens: int | None = option(
        None, "default cap on thinking tokens per request (the block is then closed and the answer constrained)",
        type=int)
    allow_duplicate_tool_calls: bool = option(
        False, "return a tool call identical to an earlier one of the same turn (by default the turn ends there)",
        action="store_true")
    loop_breaker: bool = option(
        True, "let a JSON value the model repeats without end run on to max_tokens (by default the engine "
        "closes it where the grammar allows, see docs/tool_calling.md)", flag="--no-loop-breaker", action="store_false")
    tool_constraints: bool = option(True, "do not enforce tool calls by grammar under tool_choice=auto",
                                    flag="--no-tool-constraints", action="store_false")
    max_model_len: int | None = option(None, "context length (default: the model's; 4096 on CPU)", type=int)
    dtype: str = option("auto", "weights dtype (auto: float32 on CPU, the model's own on GPU; "
                                      "bfloat16 is faster on CPU but not exact: README, CPU dtype)")
    tensor_parallel_size: int = option(1, "GPUs per replica (vLLM tensor parallelism)", type=int, short="-tp")
    pipeline_parallel_size: int = option(1, "pipeline stages (vLLM pipeline parallelism)", type=int, short="-pp")
    distributed_executor_backend: str | None = option(None, "vLLM's executor backend",
                                                      choices=("mp", "ray", "uni"))
    gpu_memory_utilization: float | None = option(None, "memory fraction for vLLM (0.9 GPU, 0.1 CPU)", type=float)
    enforce_eager: bool | None = option(None, "skip graph compilation (default: on for CPU)", action="store_true")
    kv_cache_space_gib: float | None = option(None, "CPU only: KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE)",
                                              flag="--kv-cache-space", type=float)
    max_num_seqs: int | None = option(None, "most sequences the engine runs at once", type=int)
    stream_interval: int = option(
        1, "tokens the engine gathers per streamed update (as vLLM's flag): 1 sends every token at once; "
        "more means fewer, larger SSE events and less API CPU per token under load (4: about 0.7x at 128 "
        "streams), at the cost of inter-token latency (2-4x there): docs/performance.md", type=_at_least_one)
    api_server_count: int = option(
        1, "front-end (API) processes on one port sharing one engine core (vLLM's flag): HTTP, SSE, "
        "parsing and output handling on N cores instead of one (docs/performance.md, 'Several API processes')",
        type=_at_least_one)
    event_loop: str = option(
        "auto", "the API processes' event loop: auto (uvloop where it is installed, as vLLM's own server runs; "
        "else asyncio's), uvloop or asyncio (docs/performance.md)", choices=("auto", "uvloop", "asyncio"))
    seed: int = option(0, "the engine's default seed", type=int)
    max_concurrent_requests: int = option(0, "beyond this, answer 429 (0: unlimited)", type=int)
    max_request_bytes: int = option(4 * 1024 * 1024, "larger request bodies get 413", type=int)
    max_header_bytes: int = option(32 * 1024, "larger request headers get 431", type=int)
    max_tools: int = option(128, "most tools in one request (and schemas in one check)", type=int)
    max_schema_bytes: int = option(256 * 1024, "largest schema, regex, grammar or choice list (bytes)", type=int)
    max_schema_depth: int = option(MAX_SCHEMA_DEPTH, f"deepest schema nesting (at most {MAX_SCHEMA_DEPTH}, vLLM's "
                                                     "own limit)", type=_schema_depth)
    max_schema_min_length: int = option(
        1024, "largest minLength / minItems a schema may ask for: above it the grammar matcher's memory grows "
              "with every generated token (a long minLength string reached GBs in 4k tokens), so it is refused", type=int)
    drain_timeout: float = option(30.0, "seconds to finish in-flight requests on SIGTERM", type=float)
    timeout_keep_alive: int = option(
        75, "seconds an idle keep-alive connection stays open (uvicorn's flag; nginx's default): above the "
            "clients' own idle limits (httpx and the OpenAI SDK 5 s, aiohttp 15 s, a cloud load balancer's "
            "60 s), so a client never sends on a connection the server is closing", type=int)
    precompile: str | None = option(None, "JSON file: list of schemas / tool lists to compile before "
                                          "/health turns ready")
    grammar_compile_timeout: float = option(30.0, "seconds before a compile is answered with 400", type=float)
    grammar_cache_size: int = option(512, "compile outcomes remembered (entries)", type=int)
    grammar_cache_mb: int = option(256, "memory bound of the compiled-grammar cache (MiB), in the API process "
                                        "and in the engine each", type=int)
    responses_store_size: int = option(1000, "responses kept for previous_response_id and GET /v1/responses/{id} "
                                             "(in memory, per process; 0 stores none)", type=int)
    responses_store_ttl: float = option(3600.0, "seconds a stored response is kept", type=float)
    playground: bool = option(True, "do not serve the browser playground at / (then / answers 404)",
                              flag="--no-playground", action="store_false")
    cors_origins: tuple[str, ...] = option((), "allowed CORS origin; repeat for several", flag="--cors-origin",
                                           action="append")
    log_prompts: bool = option(False, "include prompts in logs (off by default)", action="store_true")
    trust_remote_code: bool = option(False, "let the model folder run its own code", action="store_true")
    enable_auto_tool_choice: bool = option(
        False, "accepted so that vllm serve command lines carry over: tool_choice auto is always on here",
        action="store_true")
    #: Every other ``vllm serve`` engine flag (``--quantization``, ``--kv-cache-dtype``, ``--enable-prefix-caching``,
    #: ``--speculative-config``, ...), parsed by vLLM's own ``AsyncEngineArgs`` definitions: (field, value) pairs
    #: that differ from vLLM's defaults, handed to the engine as they are.
    engine_args: tuple[tuple[str, object], ...] = dataclasses.field(default=(), metadata={})

    @property
    def model_name(self) -> str:
        if self.served_model_name:
            return self.served_model_name
        if self.model is None:
            return DEFAULT_MODEL_NAME
        return self.model.rstrip("/").split("/")[-1] if Path(self.model).exists() else self.model


def is_cpu_only() -> bool:
    """True when no CUDA device is usable (vllm-cpu, laptops, CI)."""
    try:
        import torch

        return not torch.cuda.is_available()
    except (ImportError, OSError, RuntimeError):  # pragma: no cover - no usable torch means no engine anyway
        return True


def _flag(f: dataclasses.Field) -> str:
    return f.metadata["option"]["flag"] or "--" + f.name.replace("_", "-")


def env_name(flag: str) -> str:
    """The environment variable of a flag: ``--max-model-len`` -> ``GRAMSERVE_MAX_MODEL_LEN``."""
    return "GRAMSERVE_" + flag.lstrip("-").upper().replace("-", "_")


def _env_default(f: dataclasses.Field, raw: str) -> object:
    meta = f.metadata["option"]
    if meta["action"] in ("store_true", "store_false"):
        on = raw.strip().lower() in ("1", "true", "yes", "on")
        return on if meta["action"] == "store_true" else not on
    if meta["action"] == "append":
        return [v.strip() for v in raw.split(",") if v.strip()]
    return meta["type"](raw) if meta["type"] else raw


def _help(text: str) -> str:
    """A flag's help, with the family lists read from the parser registries (never copied by hand)."""
    if "{tool_parsers}" not in text and "{reasoning_parsers}" not in text:
        return text
    from reasoning_parsers import REASONING_PARSERS
    from tool_parsers import TOOL_PARSERS

    return text.format(tool_parsers=", ".join(TOOL_PARSERS), reasoning_parsers=", ".join(REASONING_PARSERS))


def build_parser() -> argparse.ArgumentParser:
    """``gramserve serve``'s flags, one per :class:`Settings` field; ``GRAMSERVE_*`` values are defaults."""
    p = argparse.ArgumentParser(prog="gramserve serve", description="Serve a model with an OpenAI-compatible API.")
    for f in _option_fields():
        meta = f.metadata["option"]
        names = [_flag(f)] + ([meta["short"]] if meta["short"] else [])
        kwargs: dict[str, Any] = {"dest": f.name, "help": _help(meta["help"])}
        default = f.default
        if meta["action"] == "append":
            kwargs["action"] = "append"
            default = list(default)  # type: ignore[arg-type]  # an append option's default is a tuple
        elif meta["action"]:
            kwargs["action"] = meta["action"]
        else:
            kwargs["type"] = meta["type"]
            kwargs["choices"] = meta["choices"]
        raw = os.environ.get(env_name(_flag(f)))
        kwargs["default"] = _env_default(f, raw) if raw is not None else default
        if meta["action"] == "append":  # argparse would add the flags to the default: keep it apart
            kwargs["default"] = None
            p.set_defaults(**{"_fallback_" + f.name: _env_default(f, raw) if raw is not None else default})
        p.add_argument(*names, **kwargs)
    return p


def _option_fields() -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(Settings) if "option" in f.metadata]


def vllm_engine_args(argv: list[str]) -> tuple[tuple[str, object], ...]:
    """``argv`` (flags gramserve does not declare) read by vLLM's own engine-argument parser: the
    fields that differ from vLLM's defaults. A flag vLLM does not know either is an error."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser(prog="gramserve serve"))
    ns, unknown = parser.parse_known_args(argv)
    if unknown:
        raise SystemExit(f"gramserve serve: unrecognized arguments (neither gramserve's nor vLLM's engine "
                         f"flags): {' '.join(unknown)}")
    given, default = AsyncEngineArgs.from_cli_args(ns), AsyncEngineArgs.from_cli_args(parser.parse_args([]))
    return tuple((f.name, getattr(given, f.name)) for f in dataclasses.fields(given)
                 if getattr(given, f.name) != getattr(default, f.name))


def settings_from_args(argv: list[str] | None = None) -> Settings:
    """Settings from ``gramserve serve``'s arguments: ``[MODEL] [flags]`` as ``vllm serve`` takes them (the
    model first, or ``--model``); flags gramserve does not declare go to :func:`vllm_engine_args`."""
    args = list(sys.argv[1:] if argv is None else argv)
    model_tag = args.pop(0) if args and not args[0].startswith("-") else None
    known, rest = build_parser().parse_known_args(args)
    ns = vars(known)
    if model_tag is not None:
        if ns["model"] is not None and ns["model"] != model_tag:
            raise SystemExit(f"gramserve serve: the model is given twice ({model_tag!r} and --model {ns['model']!r})")
        ns["model"] = model_tag
    ns["engine_args"] = vllm_engine_args(rest) if rest else ()
    for f in _option_fields():
        if f.metadata["option"]["action"] == "append":
            fallback = ns.pop("_fallback_" + f.name)
            ns[f.name] = tuple(fallback if ns[f.name] is None else ns[f.name])
    if ns["api_key_file"]:
        lines = Path(ns["api_key_file"]).read_text().splitlines()
        ns["api_keys"] = ns["api_keys"] + tuple(ln.strip() for ln in lines if ln.strip())
    for key in ("tool_call_parser", "reasoning_parser"):
        if (ns[key] or "").lower() in ("", "none"):
            ns[key] = None
    return Settings(**ns)
