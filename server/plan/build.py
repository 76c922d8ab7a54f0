"""One request plan for every API: :class:`RequestPlan`, built by :func:`build_plan`.

Chat, completions and Responses differ in how a request is spelt and how the answer is framed,
not in what runs: a prompt, sampling values, the tools and the constraint. Building that once,
in one place, keeps the three APIs from drifting apart (one ``Sampling`` construction, one
tools check, one constraint spec), and gives the run loop and the framers one thing to read.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Literal

from server.chat.generation import checked, completion_budget, logit_bias
from server.chat.prompt_tokens import guard_for, markers_are_special, tokenize_chat_prompt
from server.chat.reasoning_budget import ReasoningBudget, plan_reasoning_budget
from server.engine.base import GenerateRequest, Sampling
from server.errors import APIError, bad_request
from server.ids import new_id, secret_id
from server.json_types import JsonObject, JsonValue
from server.protocol import ChatCompletionRequest, CompletionRequest
from server.responses.protocol import ResponsesRequest
from server.responses.store import ResponseStore
from server.responses.translate import ChatPlan, rename_error, to_chat
from server.state import ServerState, check_model
from server.structured.budget import check_floor, closing_constraint
from server.structured.from_request import capabilities, request_constraint
from server.structured.spec import ConstraintSpec, constraint_spec
from server.structured.tools import ToolSpec, read_tools

__all__ = ["Api", "Prompt", "RequestPlan", "ResponsesPlan", "build_plan"]

Api = Literal["chat", "completions", "responses"]

log = logging.getLogger("gramserve.plan")


@dataclass(frozen=True)
class Prompt:
    """One engine request: the prompt's text (echoed by completions), its ids and the checked
    ``GenerateRequest`` (sampling and constraint included)."""

    text: str
    ids: list[int]
    gen: GenerateRequest


@dataclass(frozen=True)
class ResponsesPlan:
    """What only the Responses framer needs: the request as sent, its translation (the
    conversation to store, each chat message's source) and the response's own id."""

    request: ResponsesRequest
    chat: ChatPlan
    id: str = field(default_factory=lambda: "resp_" + secret_id())
    created_at: int = field(default_factory=lambda: int(time.time()))


@dataclass(frozen=True)
class RequestPlan:
    """Everything a request runs: one prompt per engine request (completions may send several),
    the sampling inside each, the normalised tools and the constraint spec, plus what the
    finishing checks need. ``request`` is what the plan was built from (Responses: the chat
    request it means)."""

    api: Api
    request: ChatCompletionRequest | CompletionRequest
    id: str
    created: int
    prompts: tuple[Prompt, ...]
    spec: ConstraintSpec
    tool_spec: ToolSpec | None = None  # the tools as read (under tool_choice "none" too: the answer's shape)
    json_schema: JsonObject | None = None  # validated after generation when not strict
    strict: bool = False
    tool_names: tuple[str, ...] | None = None  # the calls returned (None: no tools)
    tool_schemas: dict[str, JsonValue] = field(default_factory=dict)
    reasoning_budget: ReasoningBudget | None = None  # max_reasoning_tokens: two engine phases
    responses: ResponsesPlan | None = None

    @property
    def tools(self) -> ToolSpec | None:
        """The tools offered to the model (None: none, or ``tool_choice`` "none")."""
        return self.spec.tools

    @property
    def gen(self) -> GenerateRequest:
        """The (first) engine request: chat and Responses send exactly one."""
        return self.prompts[0].gen

    @property
    def prompt_ids(self) -> list[int]:
        return self.prompts[0].ids

    @property
    def sampling(self) -> Sampling:
        return self.prompts[0].gen.sampling

    @property
    def request_ids(self) -> list[str]:
        return [p.gen.request_id for p in self.prompts]


def build_plan(state: ServerState, req: ChatCompletionRequest | CompletionRequest | ResponsesRequest, *,
               store: ResponseStore | None = None) -> RequestPlan:
    """The plan of any API's request. It may block (grammar compiles, schema analysis): call it off
    the event loop, or on it inside ``server.loop_budget.inline()``, where each blocking step raises
    ``OffLoop`` first. Errors are 400s named in the request's own API's terms."""
    if isinstance(req, ResponsesRequest):
        return _responses_plan(state, req, store=store)
    if isinstance(req, CompletionRequest):
        return _completion_plan(state, req)
    return _chat_plan(state, req, api="chat")


def _sampling(state: ServerState, req: ChatCompletionRequest | CompletionRequest, *, max_tokens: int,
              logprobs: int | None, skip_special_tokens: bool = True) -> Sampling:
    """The engine's sampling values, the same for every API (only the budget and logprobs
    are spelt differently)."""
    return Sampling(
        max_tokens=max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        n=req.n,
        seed=req.seed,
        stop=req.stop_list(),
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        logprobs=logprobs,
        ignore_eos=req.ignore_eos,
        skip_special_tokens=skip_special_tokens,
        logit_bias=logit_bias(req, state.engine.vocab_size),
    )


def _chat_plan(state: ServerState, req: ChatCompletionRequest, *, api: Api,
               responses: ResponsesPlan | None = None) -> RequestPlan:
    """Validate what pydantic cannot, render the prompt and build the constraint."""
    messages = [m.model_dump(exclude_none=True) for m in req.messages]
    check_model(state, req.model)
    parser = state.tool_parser
    # the tools, read and checked once: the template, the grammar and the finishing checks read this
    tool_spec = read_tools(req, max_tools=state.settings.max_tools, can_call=parser is not None)
    tools = list(tool_spec.prompt) if tool_spec is not None and tool_spec.offered else None
    # client text that spells a control token (<|im_end|>...) is encoded as plain text; a
    # RenderError is a 400 naming its param as it stands
    prompt, prompt_ids = tokenize_chat_prompt(
        state.renderer, state.engine.tokenizer, messages, tools=tools, add_generation_prompt=True,
        chat_template_kwargs=req.chat_template_kwargs,
    )
    max_tokens = completion_budget(state.engine.max_model_len, len(prompt_ids), req.requested_max_tokens(),
                                   param="max_completion_tokens" if req.max_completion_tokens else "max_tokens",
                                   prompt_param="messages")
    reasoning_budget = plan_reasoning_budget(state, req)
    # Capped thinking runs the think block as its own engine phase: the request's constraint
    # is then the answer alone, without the reasoning prefix.
    spec = constraint_spec(req, capabilities(state), think=reasoning_budget is None, tools=tool_spec)
    built = request_constraint(state, spec)
    budget_param = "max_completion_tokens" if req.max_completion_tokens else "max_tokens"
    constraint = closing_constraint(req, spec, built)
    check_floor(state.grammar_cache, constraint, max_tokens, param=budget_param)
    # the family's markers are kept in the output where they are special tokens and calls are parsed
    keep_markers = parser is not None and bool(tools or parser.channels) and markers_are_special(
        state.engine.tokenizer, (parser.start, parser.end, parser.format.trigger))
    sampling = _sampling(state, req, max_tokens=max_tokens, logprobs=(req.top_logprobs or 0) if req.logprobs else None,
                         skip_special_tokens=not keep_markers)
    # off by default (prompts are user data); logged after every step that may move the plan off the loop,
    # so a plan built again in a thread (server/loop_budget.py) logs its prompt once
    if state.settings.log_prompts:
        log.info("prompt", extra={"prompt": prompt, "prompt_tokens": len(prompt_ids)})
    rid = "chatcmpl-" + new_id()
    tool_schemas = spec.tools.schemas if spec.tools else {}  # allowed_tools: calls to the others are not returned
    gen = checked(state.engine, GenerateRequest(request_id=rid, prompt_token_ids=prompt_ids, sampling=sampling,
                                                constraint=constraint))
    return RequestPlan(
        api=api, request=req, id=rid, created=int(time.time()), prompts=(Prompt(prompt, prompt_ids, gen),),
        spec=spec, tool_spec=tool_spec, json_schema=built.schema, strict=built.strict,
        tool_names=tuple(tool_schemas) if tools else None, tool_schemas=tool_schemas,
        reasoning_budget=reasoning_budget, responses=responses,
    )


def _responses_plan(state: ServerState, req: ResponsesRequest, *, store: ResponseStore | None) -> RequestPlan:
    """Translate, then plan exactly as chat does; errors name Responses parameters."""
    history: tuple[JsonObject, ...] = ()
    if req.previous_response_id:
        if store is None:
            raise ValueError("a Responses request with previous_response_id needs the response store")
        history = store.get(req.previous_response_id, param="previous_response_id").conversation
    chat = to_chat(req, history=history)
    try:
        return _chat_plan(state, chat.chat, api="responses", responses=ResponsesPlan(request=req, chat=chat))
    except APIError as exc:
        raise rename_error(exc, chat.sources) from exc


def _prompts(state: ServerState, req: CompletionRequest) -> list[tuple[str, list[int]]]:
    p = req.prompt
    tok = state.engine.tokenizer
    encode = guard_for(tok).encode
    if isinstance(p, str):
        return [(p, encode(p))]
    if all(isinstance(x, int) for x in p):
        ids = [int(x) for x in p]
        vocab = len(tok)
        bad = [x for x in ids if not 0 <= x < vocab]
        if bad:
            raise bad_request(f"prompt has token ids outside this model's vocabulary (0..{vocab - 1}): "
                              f"{bad[:5]}.", param="prompt", code="invalid_value")
        return [(tok.decode(ids), ids)]
    return [(s, encode(s)) for s in p if isinstance(s, str)]  # a list of strings (pydantic: never mixed)


def _completion_plan(state: ServerState, req: CompletionRequest) -> RequestPlan:
    """One engine request per prompt, each with its own budget; one constraint for all."""
    check_model(state, req.model)
    spec = constraint_spec(req, capabilities(state))
    built = request_constraint(state, spec)
    constraint = closing_constraint(req, spec, built)
    prompts = []
    for text, ids in _prompts(state, req):
        max_tokens = completion_budget(state.engine.max_model_len, len(ids), req.max_tokens,
                                       param="max_tokens", prompt_param="prompt")
        check_floor(state.grammar_cache, constraint, max_tokens, param="max_tokens")
        sampling = _sampling(state, req, max_tokens=max_tokens, logprobs=req.logprobs)
        rid = "cmpl-" + new_id()
        prompts.append(Prompt(text, ids, checked(state.engine, GenerateRequest(
            request_id=rid, prompt_token_ids=ids, sampling=sampling, constraint=constraint))))
    return RequestPlan(api="completions", request=req, id=prompts[0].gen.request_id, created=int(time.time()),
                       prompts=tuple(prompts), spec=spec)
