"""vLLM's XGrammar backend that also runs llguidance, chosen per request.

vLLM builds one structured-output backend per engine (``vllm/v1/structured_output/__init__.py``),
but no single compiler is exact on every real schema: llguidance refuses what it cannot enforce
and XGrammar covers what llguidance refuses (and every structural tag: tool calls, thinking).
gramserve decides per schema in the front end (``server/structured/schema_plan.py``) and
marks a schema meant for llguidance by sending it as a *grammar* that starts with
:data:`GUIDANCE_JSON_PREFIX`. That text is a valid llguidance Lark grammar and not a valid
XGrammar one, so if this backend were ever missing the request would fail, never run loose.

Both compilers fill the same int32 token bitmask (``ceil(vocab / 32)`` words a row), so one
bitmask serves the batch and vLLM's overlap of the mask fill with the forward pass is kept.
XGrammar's grammars from JSON schemas (a response format, a structural tag's calls) are compiled with
their length-bounded strings written as JSON strings (``server/engine/xgrammar_json.py``).
Installed in the engine-core process by :mod:`server.engine.vllm_plugin`.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from server.engine.budget_grammar import BudgetTables, make_budget_grammar
from server.engine.budget_plan import BudgetHeader, split_budget_spec
from server.engine.xgrammar_json import JSON_OBJECT_SCHEMA, fixed_ebnf
from server.lru import BoundedLRU

if TYPE_CHECKING:
    import xgrammar as xgr
    from vllm.v1.structured_output.backend_guidance import GuidanceBackend
    from vllm.v1.structured_output.backend_types import StructuredOutputGrammar, StructuredOutputOptions

__all__ = ["GUIDANCE_JSON_PREFIX", "guidance_grammar_text", "guidance_schema_text", "hybrid_backend_class"]

#: Fresh llguidance matchers kept per schema (a new one is a copy: 3-5 µs against 0.4-1.4 ms to
#: build one from the schema, on the bench's schemas); bounded in entries and in schema text.
GUIDANCE_TEMPLATES = 256
_GUIDANCE_TEMPLATE_CHARS = 8 << 20

#: How a JSON Schema for llguidance travels as vLLM's ``grammar``: this prefix, then the schema.
GUIDANCE_JSON_PREFIX = "%llguidance {}\nstart: %json "


def guidance_grammar_text(schema_json: str) -> str:
    """The ``grammar`` spec that sends ``schema_json`` (compact JSON text) to llguidance."""
    return GUIDANCE_JSON_PREFIX + schema_json


def guidance_schema_text(grammar_spec: str) -> str | None:
    """The schema a :func:`guidance_grammar_text` spec carries, or None for any other grammar."""
    if isinstance(grammar_spec, str) and grammar_spec.startswith(GUIDANCE_JSON_PREFIX):
        return grammar_spec[len(GUIDANCE_JSON_PREFIX):]
    return None


def hybrid_backend_class() -> type:
    """The backend class (built on first use: it subclasses vLLM's, imported lazily)."""
    global _CLASS
    if _CLASS is None:
        _CLASS = _make_class()
    return _CLASS


_CLASS: type | None = None


def _make_class() -> type:
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    class HybridBackend(XgrammarBackend):
        """XGrammar for everything, except the JSON schemas marked for llguidance."""

        def __post_init__(self) -> None:
            super().__post_init__()
            self._guidance: GuidanceBackend | None = None
            self._guidance_lock = threading.Lock()
            # schema text -> an untouched LLMatcher, only ever copied (XGrammar has its own cache)
            self._templates: BoundedLRU[str, object] = BoundedLRU(max_entries=GUIDANCE_TEMPLATES,
                                                                  max_chars=_GUIDANCE_TEMPLATE_CHARS)

        def _guidance_backend(self) -> GuidanceBackend:
            with self._guidance_lock:  # grammars compile on a thread pool
                if self._guidance is None:
                    from vllm.v1.structured_output.backend_guidance import GuidanceBackend

                    backend = GuidanceBackend(self.vllm_config, tokenizer=self.tokenizer, vocab_size=self.vocab_size)
                    words = (backend.ll_tokenizer.vocab_size + 31) // 32
                    if words != (self.vocab_size + 31) // 32:
                        raise ValueError(f"llguidance's vocabulary ({backend.ll_tokenizer.vocab_size}) does not fit "
                                         f"the engine's bitmask ({self.vocab_size} tokens)")
                    self._guidance = backend
                return self._guidance

        def compile_grammar(self, request_type: StructuredOutputOptions, grammar_spec: str,
                            stop_token_ids: set[int] | None = None) -> StructuredOutputGrammar:
            budgeted = split_budget_spec(grammar_spec) if request_type == StructuredOutputOptions.GRAMMAR else None
            if budgeted is not None:
                return self._budgeted(budgeted[0], budgeted[1], stop_token_ids)
            schema = guidance_schema_text(grammar_spec) if request_type == StructuredOutputOptions.GRAMMAR else None
            if schema is not None:
                return self._guidance_grammar(schema)
            kind = {StructuredOutputOptions.JSON: "json", StructuredOutputOptions.JSON_OBJECT: "json",
                    StructuredOutputOptions.STRUCTURAL_TAG: "structural_tag"}
            spec = JSON_OBJECT_SCHEMA if request_type == StructuredOutputOptions.JSON_OBJECT else grammar_spec
            fixed = (fixed_ebnf(kind[request_type], spec, any_whitespace=not self.disable_any_whitespace,
                                separators=(",", ":") if self.disable_any_whitespace else None)
                     if request_type in kind else None)
            if fixed is not None:  # bounded strings as JSON strings, compact any-values (server/engine/xgrammar_json.py)
                return super().compile_grammar(StructuredOutputOptions.GRAMMAR, fixed, stop_token_ids=stop_token_ids)
            return super().compile_grammar(request_type, grammar_spec, stop_token_ids=stop_token_ids)

        def _guidance_grammar(self, schema: str) -> StructuredOutputGrammar:
            """llguidance's grammar for ``schema``: a copy of the matcher built for it before, or a
            new one (GuidanceBackend compiles JSON with vLLM's whitespace option, as XGrammar does here)."""
            from vllm.v1.structured_output.backend_guidance import GuidanceGrammar

            backend = self._guidance_backend()
            template = self._templates.get(schema)
            if template is None:
                grammar = backend.compile_grammar(StructuredOutputOptions.JSON, schema)
                if not grammar.ll_matcher.is_error():  # (one that failed to build is built, and fails, again)
                    self._templates.put(schema, grammar.ll_matcher.deep_copy())  # before any token moves it
                return grammar
            return GuidanceGrammar(ll_matcher=template.deep_copy(), ll_tokenizer=backend.ll_tokenizer,  # type: ignore[attr-defined]
                                   vocab_size=backend.vocab_size)

        def _budgeted(self, header: BudgetHeader, inner_spec: str,
                      stop_token_ids: set[int] | None) -> StructuredOutputGrammar:
            """The inner spec's grammar behind ``header``'s budget (server/engine/budget_grammar.py)."""
            kinds = {"json": StructuredOutputOptions.JSON, "json_object": StructuredOutputOptions.JSON_OBJECT,
                     "regex": StructuredOutputOptions.REGEX, "grammar": StructuredOutputOptions.GRAMMAR,
                     "structural_tag": StructuredOutputOptions.STRUCTURAL_TAG}
            if header.kind not in kinds:
                raise ValueError(f"budget header names an unknown spec kind {header.kind!r}")
            inner = self.compile_grammar(kinds[header.kind], inner_spec, stop_token_ids=stop_token_ids)
            info = self._tokenizer_info()
            words = (self.vocab_size + 31) // 32
            tables = BudgetTables.of(id(info), lambda: BudgetTables(
                list(info.decoded_vocab), special=list(info.special_token_ids), words=words))
            stops = sorted(stop_token_ids) if stop_token_ids else list(info.stop_token_ids)
            return make_budget_grammar(inner, header, tables, stops)

        def _tokenizer_info(self) -> xgr.TokenizerInfo:
            info = getattr(self, "_budget_info", None)
            if info is None:  # the compiler's own TokenizerInfo (XgrammarBackend keeps no handle on it)
                info = self._budget_info = self.compiler.compile_builtin_json_grammar().tokenizer_info
            return info

        def destroy(self) -> None:
            super().destroy()
            if self._guidance is not None:
                self._guidance.destroy()

    return HybridBackend
