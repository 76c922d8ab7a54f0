"""Every Prometheus metric the server exports, defined once.

Names follow Prometheus conventions: ``gramserve_`` prefix, base units (seconds),
``_total`` for counters, and bounded label sets (endpoint is the route template,
status the HTTP code, outcome a fixed vocabulary). vLLM's own ``vllm:*`` engine
metrics live in the same default registry and are exported beside these.
"""
from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from server.histogram import observe_many  # (in metrics' namespace: where a caller looks for it)

__all__ = [
    "REQUESTS",
    "REQUEST_DURATION",
    "TTFT",
    "ITL",
    "QUEUE_TIME",
    "PROMPT_TOKENS",
    "COMPLETION_TOKENS",
    "RUNNING",
    "WAITING",
    "GRAMMAR_COMPILE",
    "GRAMMAR_CACHE_HITS",
    "GRAMMAR_CACHE_MISSES",
    "TOOL_CALLS",
    "CLIENT_DISCONNECTS",
    "SO_VALIDATIONS",
    "METRIC_NAMES",
    "init_labels",
    "observe_many",
]

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

REQUESTS = Counter("gramserve_requests", "HTTP requests by endpoint and status.", ["endpoint", "status"])
REQUEST_DURATION = Histogram(
    "gramserve_request_duration_seconds", "End-to-end request latency.", ["endpoint"], buckets=_LATENCY
)
TTFT = Histogram("gramserve_time_to_first_token_seconds", "Time to first generated token.", buckets=_LATENCY)
ITL = Histogram("gramserve_inter_token_latency_seconds", "Time between generated chunks per token.", buckets=_FAST)
QUEUE_TIME = Histogram("gramserve_queue_time_seconds", "Time a request waited in the engine queue.", buckets=_LATENCY)
PROMPT_TOKENS = Counter("gramserve_prompt_tokens", "Prompt tokens processed.")
COMPLETION_TOKENS = Counter("gramserve_completion_tokens", "Completion tokens generated.")
# livesum: with several API processes (--api-server-count), /metrics shows the sum over live ones
RUNNING = Gauge("gramserve_requests_running", "Generation requests in flight in this server.",
                multiprocess_mode="livesum")
WAITING = Gauge("gramserve_requests_waiting", "Generation requests that have no token yet (queued in the engine or "
                "prefilling).", multiprocess_mode="livesum")
GRAMMAR_COMPILE = Histogram(
    "gramserve_grammar_compile_seconds", "Structured-output grammar compile time (cache misses), by the backend "
    "that enforces it (xgrammar, llguidance).", ["backend"], buckets=_FAST + (10, 30)
)
GRAMMAR_CACHE_HITS = Counter("gramserve_grammar_cache_hits", "Compiled grammars served from the cache, by backend.",
                             ["backend"])
GRAMMAR_CACHE_MISSES = Counter("gramserve_grammar_cache_misses", "Grammars compiled because not cached, by backend.",
                               ["backend"])
for _backend in ("xgrammar", "llguidance"):  # exported from the start, zero until used
    GRAMMAR_COMPILE.labels(_backend)
    GRAMMAR_CACHE_HITS.labels(_backend)
    GRAMMAR_CACHE_MISSES.labels(_backend)
TOOL_CALLS = Counter(
    "gramserve_tool_calls", "Parsed tool calls by parser and outcome "
    "(valid, invalid_arguments, unknown_name, unparsed, duplicate).", ["parser", "outcome"]
)
CLIENT_DISCONNECTS = Counter("gramserve_client_disconnects", "Streams aborted because the client went away.")
SO_VALIDATIONS = Counter(
    "gramserve_structured_output_validations",
    "Post-generation JSON Schema validation of constrained outputs (valid, invalid, skipped_length).",
    ["outcome"],
)

METRIC_NAMES: tuple[str, ...] = (
    "gramserve_requests_total",
    "gramserve_request_duration_seconds",
    "gramserve_time_to_first_token_seconds",
    "gramserve_inter_token_latency_seconds",
    "gramserve_queue_time_seconds",
    "gramserve_prompt_tokens_total",
    "gramserve_completion_tokens_total",
    "gramserve_requests_running",
    "gramserve_requests_waiting",
    "gramserve_grammar_compile_seconds",
    "gramserve_grammar_cache_hits_total",
    "gramserve_grammar_cache_misses_total",
    "gramserve_tool_calls_total",
    "gramserve_client_disconnects_total",
    "gramserve_structured_output_validations_total",
)


def init_labels(*, tool_parser: str | None) -> None:
    """Create the bounded label sets up front so every series exists from the start."""
    for outcome in ("valid", "invalid", "skipped_length"):
        SO_VALIDATIONS.labels(outcome)
    for outcome in ("valid", "invalid_arguments", "unknown_name", "unparsed", "duplicate"):
        TOOL_CALLS.labels(tool_parser or "none", outcome)

