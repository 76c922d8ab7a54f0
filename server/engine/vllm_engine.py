"""The real engine: vLLM's AsyncLLM in this process, behind our :class:`Engine` types.

vLLM runs its engine core in a subprocess; the front end only sees token deltas.
Structured output is forced onto the XGrammar backend so vLLM never silently falls
back to another backend (or to no constraint); gramserve's engine plugin makes that backend
the hybrid one, which also runs llguidance for the schemas marked for it.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from server.engine.base import (
    EngineAbortedError,
    EngineDeadError,
    EngineRequestError,
    GenerateRequest,
    Sampling,
    TokenChunk,
    TokenLogprob,
    TopLogprob,
)
from server.engine.budget_plan import BudgetHeader, split_budget_spec
from server.engine.hybrid_backend import guidance_grammar_text, guidance_schema_text
from server.engine.loop_breaker import EXTRA_ARG as BREAK_LOOPS
from server.engine.loop_breaker import FQCN as LOOP_BREAKER
from server.engine.vllm_plugin import ENV_FLAG as ENGINE_PLUGIN_FLAG
from server.lru import BoundedLRU

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.outputs import CompletionOutput, RequestOutput
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.tokenizers import TokenizerLike

    from server.structured.constraints import Constraint

__all__ = ["EngineOptions", "ValidatedParams", "VllmEngine", "engine_args", "engine_config", "remember_validated_grammars",
           "structured_outputs_params"]

log = logging.getLogger("gramserve.engine")


@dataclass(frozen=True)
class EngineOptions:
    model: str
    served_model_name: str
    max_model_len: int | None = None
    dtype: str = "auto"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    distributed_executor_backend: str | None = None
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = False
    seed: int = 0
    max_num_seqs: int | None = None
    stream_interval: int = 1  # tokens per streamed engine output (vLLM's --stream-interval)
    max_logprobs: int = 20
    trust_remote_code: bool = False
    tokenizer: str | None = None
    enable_chunked_prefill: bool | None = None  # None: vLLM's default
    max_num_batched_tokens: int | None = None
    break_loops: bool = False  # close JSON values the model repeats without end (loop_breaker.py)
    engine_args: tuple[tuple[str, object], ...] = ()  # every other vllm serve engine flag (Settings.engine_args)


#: Engine arguments gramserve sets itself: its grammar backend and sampling defaults depend on them.
_OWN_ENGINE_ARGS = frozenset({"structured_outputs_config", "generation_config", "model"})


def engine_args(options: EngineOptions) -> AsyncEngineArgs:
    """vLLM's ``AsyncEngineArgs`` for these options: gramserve's own, then every other ``vllm serve``
    engine flag the command line gave (``options.engine_args``) as vLLM parsed it."""
    import dataclasses

    from vllm.config import StructuredOutputsConfig
    from vllm.engine.arg_utils import AsyncEngineArgs

    owned = sorted(name for name, _ in options.engine_args if name in _OWN_ENGINE_ARGS)
    if owned:
        raise ValueError(f"gramserve sets {', '.join(owned)} itself (its grammar backend and sampling defaults "
                         "depend on them); drop the flag")
    args = AsyncEngineArgs(
        model=options.model,
        tokenizer=options.tokenizer,
        served_model_name=[options.served_model_name],
        max_model_len=options.max_model_len,  # None: the model's own
        dtype=options.dtype,  # checked by vLLM's own argument parsing
        tensor_parallel_size=options.tensor_parallel_size,
        pipeline_parallel_size=options.pipeline_parallel_size,
        distributed_executor_backend=options.distributed_executor_backend,
        gpu_memory_utilization=options.gpu_memory_utilization,
        enforce_eager=options.enforce_eager,
        seed=options.seed,
        max_num_seqs=options.max_num_seqs,
        stream_interval=options.stream_interval,
        max_logprobs=options.max_logprobs,
        trust_remote_code=options.trust_remote_code,
        enable_chunked_prefill=options.enable_chunked_prefill,
        max_num_batched_tokens=options.max_num_batched_tokens,
        # Compact JSON: no free whitespace for a small model to loop in.
        structured_outputs_config=StructuredOutputsConfig(backend="xgrammar", disable_any_whitespace=True),
        generation_config="vllm",  # our defaults, not the model's sampling overrides
        enable_log_requests=False,
    )
    return dataclasses.replace(args, **dict(options.engine_args)) if options.engine_args else args


def engine_config(options: EngineOptions, *, api_processes: int = 1, api_rank: int = 0) -> VllmConfig:
    """vLLM's config for these options: built once per process, and by the parent of several API
    processes (``--api-server-count``) with ``api_rank=-1`` to launch the one engine core they share."""
    from vllm.usage.usage_lib import UsageContext

    args = engine_args(options)
    args._api_process_count, args._api_process_rank = api_processes, api_rank  # as vLLM's own API servers
    config = args.create_engine_config(UsageContext.ENGINE_CONTEXT)  # once: the breaker's check reads it
    if options.break_loops and _runs_v1_model_runner(config):
        config.model_config.logits_processors = [LOOP_BREAKER]
    return config


class ValidatedParams:
    """The sampling parameters ``validate`` built, handed once to ``generate`` for the same request
    object, so a request's parameters (a tools grammar's text, its budget header) are built once,
    not twice (building them: 50 µs for the bench's tools request, 26 µs for a JSON-schema one).

    One use only: vLLM keeps and changes the object it is given (``skip_clone``), so ``take``
    removes it. Keyed by request id and checked by identity through a weak reference (a request
    validated and never generated holds nothing of its prompt); bounded, oldest out first (a miss
    only builds them again). ``validate`` may run in the plan's thread: one lock."""

    MAX_ENTRIES = 256

    def __init__(self) -> None:
        self._items: OrderedDict[str, tuple[weakref.ref[GenerateRequest], SamplingParams]] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, req: GenerateRequest, params: SamplingParams) -> None:
        with self._lock:
            self._items[req.request_id] = (weakref.ref(req), params)
            while len(self._items) > self.MAX_ENTRIES:
                self._items.popitem(last=False)

    def take(self, req: GenerateRequest) -> SamplingParams | None:
        with self._lock:
            got = self._items.pop(req.request_id, None)
        return got[1] if got is not None and got[0]() is req else None

    def __len__(self) -> int:
        return len(self._items)


class VllmEngine:
    """Adapter from our types to vLLM's AsyncLLM."""

    def __init__(self, options: EngineOptions, *, client: Mapping[str, object] | None = None) -> None:
        """``client``: vLLM's client config of one of several API processes sharing an engine core
        (addresses, ``client_count``, ``client_index``: server/api_servers.py); None starts our own."""
        from vllm.v1.engine.async_llm import AsyncLLM

        remember_validated_grammars()
        client = dict(client or {})
        count, index = client.pop("client_count", 1), client.pop("client_index", 0)
        assert isinstance(count, int) and isinstance(index, int), "vLLM's client count and index are ints"
        client.pop("api_server_loads", None)  # vLLM's accept balancing: uvicorn here accepts as it can
        config = engine_config(options, api_processes=count, api_rank=index)
        self._break_loops = LOOP_BREAKER in (config.model_config.logits_processors or ())
        # llguidance runs beside XGrammar only where the engine plugin installs the hybrid backend.
        self.guidance = os.environ.get(ENGINE_PLUGIN_FLAG) == "1"
        # vLLM's Prometheus metrics (exported on /metrics), recorded when read (vllm_stats.py), and
        # not its LoggingStatLogger: that one records every engine step for a periodic log line
        # only vLLM's own server triggers (do_log_stats), so here it was per-token work for nothing.
        from server.engine.vllm_stats import CoalescingStatLogger

        self._llm = AsyncLLM.from_vllm_config(config, enable_log_requests=False, disable_log_stats=True,
                                              stat_loggers=[CoalescingStatLogger], client_addresses=client or None,
                                              client_count=count, client_index=index)
        manager = self._llm.logger_manager
        self._stat_loggers = [x for x in getattr(manager, "stat_loggers", ()) if hasattr(x, "flush")]
        self._validated = ValidatedParams()
        self.model_name = options.served_model_name
        self.max_model_len = int(self._llm.model_config.max_model_len)
        self.tokenizer = self._llm.get_tokenizer()
        self.vocab_size = int(self._llm.model_config.get_vocab_size())  # the lm_head width
        # vLLM's env settings, read once from now on, as its engine core does after start: its
        # output processing reads one per request per step (~2% of the API process's CPU).
        from vllm import envs as vllm_envs

        if hasattr(vllm_envs, "enable_envs_cache"):
            vllm_envs.enable_envs_cache()

    def is_dead(self) -> bool:
        return bool(self._llm.errored)

    def flush_metrics(self) -> None:
        """Record the engine steps whose ``vllm:*`` metrics are still waiting (before a scrape)."""
        for stat_logger in self._stat_loggers:
            stat_logger.flush()

    def validate(self, req: GenerateRequest) -> None:
        try:
            params = self._sampling_params(req)
        except ValueError as exc:
            raise EngineRequestError(str(exc)) from exc
        self._validated.keep(req, params)

    async def generate(self, req: GenerateRequest) -> AsyncIterator[TokenChunk]:
        from vllm.inputs.engine import tokens_input
        from vllm.v1.engine.exceptions import EngineDeadError as VllmDead

        s = req.sampling
        try:
            params = self._validated.take(req) or self._sampling_params(req)
        except ValueError as exc:  # vLLM's own checks on the values: a bad request, not a crash
            raise EngineRequestError(str(exc)) from exc
        # vLLM refuses n>1 for greedy sampling; OpenAI answers it. Greedy choices are identical,
        # so one is generated and copied to every index.
        copies = _greedy_copies(s)
        prompt = tokens_input(list(req.prompt_token_ids))
        sent_prompt: set[int] = set()  # choices whose first chunk (prompt size, queue time) went out
        # One choice, no logprobs: after its first chunk, every running output is one plain chunk
        # (the per-token path in a few steps; the general loop below decides everything else).
        single = copies == 1 and params.n == 1 and s.logprobs is None
        try:
            async for out in self._llm.generate(prompt, params, req.request_id):
                outputs = out.outputs
                if single and sent_prompt and len(outputs) == 1 and (c := outputs[0]).finish_reason is None:
                    yield TokenChunk(c.index, c.text, len(c.token_ids))
                    continue
                for c in outputs:
                    if c.finish_reason == "abort":  # never reported as a normal stop
                        raise EngineAbortedError(f"request {req.request_id} was aborted")
                    logprobs = _logprobs(c, self.tokenizer, s.logprobs) if s.logprobs is not None else ()
                    finish = _finish_reason(c.finish_reason)
                    for index in range(c.index, c.index + copies):
                        if index in sent_prompt:  # every later token: the per-token path
                            yield TokenChunk(index, c.text, len(c.token_ids), finish, logprobs)
                            continue
                        sent_prompt.add(index)
                        yield TokenChunk(index, c.text, len(c.token_ids), finish, logprobs,
                                         prompt_tokens=len(out.prompt_token_ids or ()),
                                         queue_seconds=_queue_seconds(out))
        except VllmDead as exc:
            raise EngineDeadError(str(exc)) from exc
        except ValueError as exc:  # vLLM's own validation (e.g. grammar it rejects)
            raise EngineRequestError(str(exc)) from exc

    def _sampling_params(self, req: GenerateRequest) -> SamplingParams:
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        s = req.sampling
        return SamplingParams(
            n=s.n // _greedy_copies(s),
            max_tokens=s.max_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            seed=s.seed,
            stop=list(s.stop) or None,
            presence_penalty=s.presence_penalty,
            frequency_penalty=s.frequency_penalty,
            logprobs=s.logprobs,
            ignore_eos=s.ignore_eos,
            skip_special_tokens=s.skip_special_tokens,
            logit_bias=dict(s.logit_bias) or None,
            output_kind=RequestOutputKind.DELTA,
            structured_outputs=(structured_outputs_params(req.constraint, max_tokens=s.max_tokens)
                                if req.constraint else None),
            extra_args={BREAK_LOOPS: True} if self._break_loops and _holds_json(req.constraint) else None,
            # made for this request and submitted once: vLLM's own server skips the deep copy too
            skip_clone=True,
        )

    async def abort(self, request_id: str) -> None:
        await self._llm.abort(request_id)

    async def check_health(self) -> None:
        from vllm.v1.engine.exceptions import EngineDeadError as VllmDead

        if self._llm.errored:
            raise EngineDeadError(str(self._llm.dead_error))
        try:
            await self._llm.check_health()
        except VllmDead as exc:
            raise EngineDeadError(str(exc)) from exc

    async def shutdown(self) -> None:
        self._llm.shutdown()


def structured_outputs_params(constraint: Constraint, *, max_tokens: int | None = None) -> StructuredOutputsParams:
    """vLLM's ``StructuredOutputsParams`` for one of our engine-neutral ``Constraint``s; a
    constraint that closes within the budget travels wrapped in its budget header
    (``server/engine/budget_grammar.py`` reads it in the engine)."""
    from vllm.sampling_params import StructuredOutputsParams

    if getattr(constraint, "closes", False) and max_tokens and constraint.kind != "choice":
        kind, inner = _inner_spec(constraint)
        header = BudgetHeader(max_tokens=max_tokens, kind=kind, closers=tuple(constraint.closers))
        return StructuredOutputsParams(grammar=header.wrap(inner))
    kind, value = constraint.kind, constraint.value
    if kind == "json" and constraint.backend == "llguidance":  # the hybrid backend's marked grammar
        return StructuredOutputsParams(grammar=guidance_grammar_text(constraint.text))
    if kind == "json":
        return StructuredOutputsParams(json=value)
    if kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    if kind == "regex":
        return StructuredOutputsParams(regex=value)
    if kind == "choice" and isinstance(value, tuple):  # always its tuple of texts
        return StructuredOutputsParams(choice=list(value))
    if kind == "grammar":
        return StructuredOutputsParams(grammar=value)
    if kind == "structural_tag":
        return StructuredOutputsParams(structural_tag=constraint.text)
    raise ValueError(f"unknown constraint kind {kind!r}")


def _inner_spec(constraint: Constraint) -> tuple[str, str]:
    """The (vLLM option, spec text) that a budget header wraps."""
    kind, value = constraint.kind, constraint.value
    if kind == "json" and constraint.backend == "llguidance":
        return "grammar", guidance_grammar_text(constraint.text)
    if kind in ("json", "structural_tag"):
        return kind, value if isinstance(value, str) else constraint.text  # (made once with the constraint)
    if kind == "json_object":
        return kind, ""
    return kind, str(value)  # regex, grammar: their text (a str already)


_VALIDATED_MAX = 1024  # grammar specs remembered as valid (LRU)


def remember_validated_grammars() -> None:
    """Let vLLM's per-request grammar check skip specs it has already passed.

    vLLM validates every request's structured-output spec on the event loop by building the
    grammar from scratch (``xgr.Grammar.from_structural_tag`` / ``from_json_schema``): for an
    agent's tool set that is ~0.6 ms per request, every request, in front of every stream's
    tokens. The check is a pure function of the spec, and gramserve has compiled the same spec
    itself before sending it, so a spec that passed once is remembered (bounded) and passes
    again without the rebuild. Specs that fail are not remembered; other kinds (choice, which
    the check rewrites into a grammar) always run the original.
    """
    try:
        from vllm.v1.structured_output import backend_xgrammar

        original = backend_xgrammar.validate_xgrammar_grammar
    except (ImportError, AttributeError):  # another vLLM layout: its check runs as it is
        log.info("vLLM's grammar check is not where this version expects it; it runs on every request")
        return
    if getattr(original, "remembers_specs", False):
        return
    passed: BoundedLRU[tuple[str, str], bool] = BoundedLRU(max_entries=_VALIDATED_MAX, max_chars=32 << 20)

    def validate(sampling_params: SamplingParams) -> None:
        grammar = getattr(sampling_params.structured_outputs, "grammar", None) or ""
        if guidance_schema_text(grammar) is not None or split_budget_spec(grammar) is not None:
            return  # llguidance's or budgeted: gramserve compiled it itself; XGrammar's check does not apply
        key = _spec_key(sampling_params.structured_outputs)
        if key is not None and passed.get(key):
            return
        original(sampling_params)
        if key is not None:
            passed.put(key, True)

    validate.remembers_specs = True  # type: ignore[attr-defined]
    backend_xgrammar.validate_xgrammar_grammar = validate


def _spec_key(so: StructuredOutputsParams | None) -> tuple[str, str] | None:
    """A JSON schema or structural tag alone (nothing the check rewrites): its text; else None."""
    if so is None or any(getattr(so, name, True) for name in ("regex", "choice", "grammar", "json_object")):
        return None
    tag, schema = getattr(so, "structural_tag", None), getattr(so, "json", None)
    if isinstance(tag, str) and schema is None:
        return "structural_tag", tag
    if schema is not None and tag is None:
        return "json", schema if isinstance(schema, str) else json.dumps(schema, separators=(",", ":"))
    return None


def _runs_v1_model_runner(config: VllmConfig) -> bool:
    """Whether vLLM will use its V1 model runner, whose logits-processor interface the loop breaker implements.

    Model Runner V2 (the default on CUDA with Triton) takes processors of another interface;
    there the breaker stays off, with a warning, rather than failing the engine's start.
    """
    if not config.use_v2_model_runner:
        return True
    log.warning("loop breaker off: vLLM runs Model Runner V2 here; VLLM_USE_V2_MODEL_RUNNER=0 selects V1, "
                "where it works (or pass --no-loop-breaker to silence this)")
    return False


def _holds_json(constraint: Constraint | None) -> bool:
    """Constraints whose output is (or contains, as tool-call arguments) JSON: the loop breaker's."""
    return constraint is not None and constraint.kind in ("json", "json_object", "structural_tag")


def _greedy_copies(s: Sampling) -> int:
    """How many copies of one generated choice make the ``n`` asked (n for greedy, else 1)."""
    return s.n if s.n > 1 and s.temperature == 0 else 1


def _finish_reason(reason: str | None) -> str | None:
    if reason is None:
        return None
    return "length" if reason == "length" else "stop"


def _queue_seconds(out: RequestOutput) -> float | None:
    m = getattr(out, "metrics", None)
    queued = getattr(m, "queued_ts", None)
    scheduled = getattr(m, "scheduled_ts", None)
    if queued and scheduled and scheduled >= queued:
        return scheduled - queued
    return None


def _token_text(tokenizer: TokenizerLike, token_id: int, decoded: str | None) -> str:
    if decoded is not None:
        return decoded
    return tokenizer.decode([token_id])


def _logprobs(c: CompletionOutput, tokenizer: TokenizerLike, k: int) -> tuple[TokenLogprob, ...]:
    if not c.logprobs:
        return ()
    result = []
    for token_id, step in zip(c.token_ids, c.logprobs, strict=False):
        chosen = step.get(token_id)
        tops = sorted(step.items(), key=lambda kv: kv[1].rank or 0)
        top = tuple(
            TopLogprob(
                token=(t := _token_text(tokenizer, tid, lp.decoded_token)),
                logprob=max(float(lp.logprob), -9999.0),
                bytes=list(t.encode("utf-8")),
            )
            for tid, lp in tops
            if lp.rank is not None and 1 <= lp.rank <= k
        )
        text = _token_text(tokenizer, token_id, chosen.decoded_token if chosen else None)
        result.append(
            TokenLogprob(
                token=text,
                logprob=max(float(chosen.logprob), -9999.0) if chosen else -9999.0,
                bytes=list(text.encode("utf-8")),
                top=top,
            )
        )
    return tuple(result)

