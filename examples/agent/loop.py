"""The ReAct loop on the official ``openai`` SDK: thought -> action(s) -> observation(s), repeated.

* Each model turn is one chat completion with ``tools``. Its text is the thought, its tool calls are
  the actions. All calls of a turn run concurrently (a thread pool); each result goes back as a
  ``tool`` message carrying its ``tool_call_id``.
* A tool that fails becomes an observation ``{"error": ..., "tool": ...}``. Transient failures are
  retried once; a refusal or bad arguments are not (the same call would fail the same way), the
  model reads the error and decides.
* After ``max_iterations`` turns that called tools, one last turn with ``tool_choice: "none"``
  answers from what has been observed, and the answer says it stopped early.
* A TTL cache keyed by (tool, canonical arguments) runs a repeated call once.
"""
from __future__ import annotations

import inspect
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from .cache import TTLCache, canonical_key
from .tools import Tool, ToolError, tool_spec

__all__ = ["SYSTEM_PROMPT", "Action", "Agent", "Observation", "RunResult", "Step"]

SYSTEM_PROMPT = (
    "You are the procurement assistant of one company. Tools:\n"
    "- sql_query: the company database (orders, contracts, providers, regions): counts, sums, "
    "lists, amounts, dates.\n"
    "- vector_search: the company documents: policies, contract clauses, procedures.\n"
    "- web_search: the public internet: market prices, news, outside facts.\n"
    "Pick the tool that fits the question; call several at once when the question needs several "
    "sources. Use the observations to answer, never invent numbers. If a tool returns an error, fix "
    "the call or use another tool. If a tool is unavailable, say so plainly and answer from the "
    "internal sources you have. Answer briefly."
)
LIMIT_NOTE = ("You have used all your tool turns. Answer now from the observations above; say what "
              "is missing if they are not enough.")


@dataclass
class Action:
    id: str
    name: str
    arguments: dict[str, Any] | None  # None: the call's arguments did not parse
    raw_arguments: str


@dataclass
class Observation:
    tool_call_id: str
    name: str
    content: dict[str, Any]
    error: bool = False
    cached: bool = False
    attempts: int = 0
    latency_s: float = 0.0


@dataclass
class Step:
    iteration: int
    thought: str | None
    actions: list[Action] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    model_latency_s: float = 0.0
    tools_latency_s: float = 0.0
    finish_reason: str | None = None
    cut_calls: int = 0  # calls max_tokens cut before their arguments closed: not run, not sent back

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunResult:
    question: str
    answer: str
    steps: list[Step]
    stopped_by_limit: bool = False
    error: str | None = None          # the model server refused a turn (e.g. context too long)
    unparsable_calls: int = 0         # calls whose name or arguments did not parse
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def iterations(self) -> int:
        """Model turns taken (tool turns plus the answering turn)."""
        return len(self.steps)

    def tools_called(self) -> list[str]:
        return [a.name for s in self.steps for a in s.actions]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "iterations": self.iterations}


class Agent:
    def __init__(self, *, client: Any, model: str, tools: Sequence[Tool], system_prompt: str = SYSTEM_PROMPT,
                 max_iterations: int = 6, tool_choice: Any = "auto", first_tool_choice: Any = None,
                 max_tokens: int = 256,
                 temperature: float = 0.0, cache: TTLCache | None = None, max_workers: int = 4,
                 max_observation_chars: int = 2000, on_step: Callable[[Step], None] | None = None) -> None:
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        self.client = client
        self.model = model
        self.tools = {t.name: t for t in tools}
        self.specs = [tool_spec(t) for t in tools]
        self.system_prompt = system_prompt
        self.max_iterations = max_iterations
        self.tool_choice = tool_choice
        self.first_tool_choice = first_tool_choice  # e.g. "required" for the first turn only; None: tool_choice
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.cache = cache if cache is not None else TTLCache()
        self.max_workers = max_workers
        self.max_observation_chars = max_observation_chars
        self.on_step = on_step

    # -- the loop -----------------------------------------------------------------------------
    def run(self, question: str) -> RunResult:
        started = time.perf_counter()
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.system_prompt},
                                          {"role": "user", "content": question}]
        result = RunResult(question=question, answer="", steps=[])
        with ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="tool") as pool:
            for iteration in range(1, self.max_iterations + 1):
                choice = self.first_tool_choice if iteration == 1 and self.first_tool_choice is not None else self.tool_choice
                step = self._turn(messages, result, iteration, tool_choice=choice)
                if step is None:
                    break
                if not step.actions:
                    result.answer = step.thought or ""
                    break
                t0 = time.perf_counter()
                step.observations = list(pool.map(self._observe, step.actions))
                step.tools_latency_s = time.perf_counter() - t0
                for obs in step.observations:
                    messages.append({"role": "tool", "tool_call_id": obs.tool_call_id,
                                     "content": self._render(obs.content)})
                self._emit(step)
            else:
                result.stopped_by_limit = True
                messages.append({"role": "user", "content": LIMIT_NOTE})
                step = self._turn(messages, result, self.max_iterations + 1, tool_choice="none")
                text = (step.thought or "") if step else ""
                result.answer = (f"[Stopped after {self.max_iterations} tool turns; this answer uses only "
                                 f"what was gathered so far.] {text}").strip()
        result.latency_s = time.perf_counter() - started
        return result

    def _turn(self, messages: list[dict[str, Any]], result: RunResult, iteration: int, *,
              tool_choice: Any) -> Step | None:
        """One model call; None when the server refused it (recorded in result.error)."""
        import openai

        t0 = time.perf_counter()
        try:
            response = self.client.chat.completions.create(
                model=self.model, messages=messages, tools=self.specs, tool_choice=tool_choice,
                parallel_tool_calls=True, max_tokens=self.max_tokens, temperature=self.temperature)
        except openai.BadRequestError as exc:
            result.error = f"the model server refused turn {iteration}: {exc.message}"
            result.answer = result.answer or f"[No answer: {result.error}]"
            return None
        choice = response.choices[0]
        message = choice.message
        step = Step(iteration=iteration, thought=message.content, model_latency_s=time.perf_counter() - t0,
                    finish_reason=choice.finish_reason)
        if response.usage is not None:
            result.prompt_tokens += response.usage.prompt_tokens
            result.completion_tokens += response.usage.completion_tokens
        calls = list(message.tool_calls or ())
        for i, call in enumerate(calls):
            arguments = _parse_arguments(call.function.arguments)
            if arguments is None and choice.finish_reason == "length" and i == len(calls) - 1:
                step.cut_calls += 1  # returned as far as it was written (the server's unfinished-call rule)
                continue
            if arguments is None or call.function.name not in self.tools:
                result.unparsable_calls += 1
            step.actions.append(Action(id=call.id, name=call.function.name, arguments=arguments,
                                       raw_arguments=call.function.arguments))
        result.steps.append(step)
        if step.actions:
            messages.append({"role": "assistant", "content": message.content, "tool_calls": [
                {"id": a.id, "type": "function", "function": {"name": a.name, "arguments": _history_arguments(a)}}
                for a in step.actions]})
        else:
            self._emit(step)
        return step

    # -- tools --------------------------------------------------------------------------------
    def _observe(self, action: Action) -> Observation:
        t0 = time.perf_counter()
        obs = Observation(tool_call_id=action.id, name=action.name, content={})
        tool = self.tools.get(action.name)
        if tool is None:
            obs.content, obs.error = _error(action.name, f"unknown tool; available: {', '.join(self.tools)}"), True
        elif action.arguments is None:
            obs.content, obs.error = _error(action.name, "arguments are not a JSON object"), True
        else:
            attempts = [0]

            def compute() -> dict[str, Any]:
                return self._execute(tool, action.arguments, attempts)

            if tool.cacheable:
                obs.content, obs.cached = self.cache.get_or_run(
                    canonical_key(tool.name, action.arguments), compute, keep=lambda c: "error" not in c)
            else:
                obs.content = compute()
            obs.error = "error" in obs.content
            obs.attempts = attempts[0]
        obs.latency_s = time.perf_counter() - t0
        return obs

    def _execute(self, tool: Tool, arguments: dict[str, Any], attempts: list[int]) -> dict[str, Any]:
        try:
            inspect.signature(tool.run).bind(**arguments)
        except TypeError as exc:
            return _error(tool.name, f"bad arguments: {exc}")
        for attempt in (1, 2):
            attempts[0] = attempt
            try:
                out = tool.run(**arguments)
                return out if isinstance(out, dict) else {"result": out}
            except ToolError as exc:
                if not exc.retryable or attempt == 2:
                    return _error(tool.name, str(exc))
            except Exception as exc:  # a bug or outage in the tool: the model reads it, the loop goes on
                if attempt == 2:
                    return _error(tool.name, f"{type(exc).__name__}: {exc}")
        raise AssertionError("unreachable")

    def _render(self, content: dict[str, Any]) -> str:
        """JSON for the tool message, trimmed to ``max_observation_chars`` (a tiny context) by
        dropping trailing rows/results, so it stays valid JSON."""
        text = json.dumps(content, ensure_ascii=False, default=str)
        if len(text) <= self.max_observation_chars:
            return text
        content = dict(content)
        for key in ("rows", "results"):
            items = list(content.get(key) or [])
            while items and len(text) > self.max_observation_chars:
                items.pop()
                content[key] = items
                content["truncated"] = True
                text = json.dumps(content, ensure_ascii=False, default=str)
        if len(text) > self.max_observation_chars:
            text = json.dumps({"truncated": True, "text": text[: self.max_observation_chars]}, ensure_ascii=False)
        return text

    def _emit(self, step: Step) -> None:
        if self.on_step is not None:
            self.on_step(step)


def _parse_arguments(raw: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(raw or "")
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _error(tool: str, message: str) -> dict[str, Any]:
    return {"error": message, "tool": tool}


def _history_arguments(action: Action) -> str:
    """The call's arguments as the history sends them back. A call cut by ``max_tokens`` comes back
    as far as it was written (not JSON); the server refuses such history, so it goes back as a JSON
    object that keeps the text, and the tool's observation tells the model it was not run."""
    if action.arguments is not None:
        return action.raw_arguments
    return json.dumps({"unparsed_arguments": action.raw_arguments})
