"""Each tool-call family on its model's real vocabulary, through the whole server path with real vLLM.

The rest of the suite runs every family on SmolLM2's 49k vocabulary, where the markers are text. Here a
tiny random-weight stand-in (bench/vocab_standin.py) has the family's real tokenizer (markers as single
added tokens, at their real ids, special or not as in the real tokenizer.json) and its real template:

- the built tokenizer encodes as the package's own encoder, and every marker is one token;
- prompt ids are the template's text encoded, each of the template's control tokens one id, and a
  user's text holding the markers stays text (the prompt has exactly the template's own marker ids);
- the tool grammar compiles over the full vocabulary (the model's width) in the server's own cache;
- a forced call (``required``, named) on the real server, streamed and whole: random weights under the
  grammar still write a call, which comes back as OpenAI ``tool_calls`` that fit the schema.

One row per family in ``ROWS``: add a row to run a new family on its vocabulary. One server per row,
each started once (the stand-in is 1 layer, hidden 64: the engine starts in seconds).
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.server_process import API_KEY, CLIENT_TIMEOUT_S, ROOT, ServerProcess

pytestmark = pytest.mark.e2e

__all__ = ["ROWS", "Row"]

MAX_TOKENS = 96
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "days", "note"], "properties": {
        "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "note": {"type": "string", "maxLength": 10}}}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a zone.",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["zone"],
                   "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}}}}
TOOLS = [WEATHER, TIME]
SCHEMAS: dict[str, Any] = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}  # type: ignore[index]
SAMPLE_TEXTS = ["Hello, world! café résumé 日本語のトークナイザー 12345678 \U0001f680\n\n  x\t",
                "def f(x):\n    return [i**2 for i in range(100)]  # 1+2+3==6", '{"city": "Paris", "days": 3}']


def _template(path: str) -> Callable[[], str]:
    return lambda: (ROOT / path).read_text(encoding="utf-8")


def _mistral_tekken_template() -> str:
    """mistral-common's own chat template for its tekken (v3) tokenizer: Mistral Nemo's."""
    from mistral_common.integrations.chat_templates.chat_templates import generate_chat_template
    from mistral_common.tokens.tokenizers.base import TokenizerVersion

    return generate_chat_template(
        spm=False, tokenizer_version=TokenizerVersion("v3"), image_support=False, audio_support=False,
        thinking_support=False, default_system_prompt=None, plain_thinking_support=False,
        use_special_token_variables=False, model_settings_fields=None, reasoning_effort_values=None,
        reasoning_effort_default=None)


@dataclass(frozen=True)
class Row:
    """A family on its real vocabulary.

    ``control``: the template's control-token texts (a user's copy must stay text); ``markers``: the call
    format's marker texts, each one token of the vocabulary; ``special``: which of those the real
    tokenizer marks special; ``closing``: texts the stand-in's head favours (bench/vocab_standin.py), so
    that values and calls close under random weights; ``end``: its end-of-turn text."""
    family: str
    vocab: str
    template: Callable[[], str]
    parser: str
    control: tuple[str, ...]
    markers: tuple[str, ...]
    special: frozenset[str]
    end: str
    closing: tuple[str, ...] = ()
    closing_bias: float | None = None  # the closing texts' logit bias (None: bench.standin's for </tool_call>)
    prefer: dict[str, float] = field(default_factory=dict)  # more texts to bias (text -> logit)
    known: dict[str, str] = field(default_factory=dict)  # server test name -> a known bug (strict xfail)
    kwargs: dict[str, Any] = field(default_factory=dict)  # chat_template_kwargs of every request

    @property
    def id(self) -> str:
        return f"{self.family}-{self.vocab}"


# XGrammar's qwen_xml style lets up to 16 whitespace characters surround a parameter's value (the
# structural tag's max_whitespace_cnt); the qwen3_coder parser keeps them in a string value. On Qwen3.5's
# vocabulary the token " <" writes "CET </parameter>", read back as {"zone": "CET "}: not in the enum.
_QWEN_XML_WS = ("the qwen3_coder grammar admits whitespace around a parameter value that the parser keeps "
                "(\"CET \" for an enum of \"CET\"): grammar and parser disagree (issue 36)")

# Greedy on random weights, the named call stops between two DSML parameters until max_tokens: the call
# comes back unfinished ('{"city": "Tokyo", "days": 4', finish_reason length, by the unfinished-call rule).
# The grammar and parser over this vocabulary are checked by test_deepseek_v4.py; required passes here.
_DSML_STANDIN = ("the random-weight stand-in does not reach the next DSML parameter within max_tokens under "
                 "the named grammar (a stand-in artifact; the call is returned unfinished with finish_reason length)")

ROWS: list[Row] = [
    Row("hermes", "qwen3", _template("tests/data/templates/qwen3.jinja"), "hermes",
        control=("<|im_start|>", "<|im_end|>"), markers=("<tool_call>", "</tool_call>", "<think>", "</think>"),
        special=frozenset({"<|im_start|>", "<|im_end|>"}), end="<|im_end|>", closing=("</tool_call>", "</think>"),
        kwargs={"enable_thinking": False}),
    Row("qwen3_coder", "qwen3_5", _template("chat_templates/qwen3_coder.jinja"), "qwen3_coder",
        control=("<|im_start|>", "<|im_end|>"), markers=("<tool_call>", "</tool_call>"),
        special=frozenset({"<|im_start|>", "<|im_end|>"}), end="<|im_end|>", closing=("</tool_call>",),
        known=dict.fromkeys(("forced_call", "server_prompt"), _QWEN_XML_WS)),
    Row("deepseek_v31", "deepseek_v4", _template("tests/data/templates/deepseek_v31.jinja"), "deepseek_v31",
        control=("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"),
        markers=("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
                 "<｜tool▁calls▁end｜>"),
        special=frozenset({"<｜end▁of▁sentence｜>"}), end="<｜end▁of▁sentence｜>",
        closing=("<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>")),
    Row("deepseek_v4", "deepseek_v4", _template("tests/data/templates/deepseek_v4.jinja"), "deepseek_v4",
        control=("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"), markers=("｜DSML｜", "<think>", "</think>"),
        special=frozenset({"<｜end▁of▁sentence｜>"}), end="<｜end▁of▁sentence｜>",
        closing=("</｜DSML｜parameter>", "</｜DSML｜invoke>", "</｜DSML｜tool_calls>"), kwargs={"thinking": False},
        known={"forced_call_named": _DSML_STANDIN}),
    Row("llama3_json", "llama3", _template("tests/data/templates/llama3_json.jinja"), "llama3_json",
        control=("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"), markers=("<|python_tag|>", "<|eom_id|>"),
        special=frozenset({"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|python_tag|>", "<|eom_id|>"}),
        end="<|eot_id|>"),
    Row("gpt_oss", "o200k_harmony", _template("tests/data/templates/gpt_oss.jinja"), "gpt_oss",
        control=("<|start|>", "<|message|>", "<|end|>"), markers=("<|channel|>", "<|constrain|>", "<|call|>"),
        special=frozenset({"<|start|>", "<|message|>", "<|end|>", "<|channel|>", "<|constrain|>", "<|call|>"}),
        # the grammar lets a message run before the call: a random model loops analysis messages unless it
        # prefers " to" (a recipient right after <|start|>assistant) and writes the markers as their tokens
        end="<|call|>", closing=("<|end|>",), closing_bias=20.0,  # above the top random logit of 200k tokens
        prefer={" to": 22.0, "<|channel|>": 18.0, "<|message|>": 18.0, "<|constrain|>": 18.0}),
    Row("mistral", "tekken", _mistral_tekken_template, "mistral",
        control=("[INST]", "[/INST]"), markers=("[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]"),
        special=frozenset({"[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]"}),
        end="</s>"),
]


@pytest.fixture(scope="module", params=ROWS, ids=[r.id for r in ROWS])
def row(request: pytest.FixtureRequest) -> Row:
    return request.param


@pytest.fixture(scope="module")
def folder(row: Row) -> Path:
    from bench.vocab_standin import ensure_vocab_standin, vocab_closing_texts

    return ensure_vocab_standin(row.vocab, row.template(), vocab_closing_texts(*row.closing, end=row.end, bias=row.closing_bias,
                                                                     more=row.prefer))


@pytest.fixture(scope="module")
def served_tokenizer(folder: Path) -> Any:
    """The tokenizer as the engine loads it (vLLM's own loader, from the folder)."""
    from vllm.tokenizers import get_tokenizer

    return get_tokenizer(str(folder))


#: Rows whose real server runs in ``make test`` (one engine start each, about a minute on 2 cores): three
#: vocabularies of three shapes (DeepSeek's byte-level BPE, Harmony's o200k, Mistral's tekken), to keep the
#: suite inside its time. ``GRAMSERVE_REAL_VOCAB_SERVERS=all`` runs every row's server; the tokenizer, prompt
#: and grammar tests above run for every row always.
SERVED_BY_DEFAULT = ("deepseek_v31-deepseek_v4", "gpt_oss-o200k_harmony", "mistral-tekken")


_SERVED = [r for r in ROWS if os.environ.get("GRAMSERVE_REAL_VOCAB_SERVERS") == "all" or r.id in SERVED_BY_DEFAULT]
#: The server tests run on these rows only (indirect parametrisation of ``row``; nothing is skipped).
on_served_rows = pytest.mark.parametrize("row", _SERVED, ids=[r.id for r in _SERVED], indirect=True, scope="module")


@pytest.fixture(scope="module")
def server(row: Row, folder: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(["--api-key", API_KEY, "--model", str(folder), "--served-model-name", "standin",
                         "--tool-call-parser", row.parser, "--max-model-len", "4096", "--kv-cache-space", "1"],
                        log_name=f"vocab-{row.id}")
    try:
        print(f"\n[e2e] {row.id} stand-in ready in {srv.wait_ready():.1f}s")
        yield srv
    finally:
        code = srv.stop()
    assert code == 0, f"{row.id} server exited {code} on SIGTERM; log:\n{srv.tail()}"


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base, headers={"Authorization": f"Bearer {API_KEY}"},
                      timeout=CLIENT_TIMEOUT_S) as c:
        yield c


def _renderer(row: Row, folder: Path) -> Any:
    from chat_templates import BUILTIN_TEMPLATES
    from server.chat.render import ChatRenderer
    from tool_parsers import resolve_parsers

    renderer = ChatRenderer.from_model(model_dir_or_tokenizer=str(folder))
    parsers = resolve_parsers(row.parser, "auto", template_name=renderer.template_name,
                              template_source=renderer.template_source, builtin_names=tuple(BUILTIN_TEMPLATES))
    return renderer.for_family(parsers.family)


# --- the vocabulary and the prompt, as the server builds them (no server) --------------------------------

def test_the_tokenizer_is_the_packages_and_markers_are_single_tokens(row: Row) -> None:
    from bench.vocab_standin import build_tokenizer

    built = build_tokenizer(row.vocab)
    tok = built.tokenizer
    if built.encode is not None:  # the conversion from the package's ranks is exact
        for text in SAMPLE_TEXTS + ["".join(row.control + row.markers) + " x"]:
            assert tok.encode(text, add_special_tokens=False).ids == built.encode(text), text
    added = {t.content: t for t in tok.get_added_tokens_decoder().values()}
    for text in row.control + row.markers:
        assert tok.encode(text, add_special_tokens=False).ids == [tok.token_to_id(text)], text
        assert added[text].special == (text in row.special), text


def test_prompt_ids_come_from_the_template_and_a_users_markers_stay_text(row: Row, folder: Path,
                                                                         served_tokenizer: Any) -> None:
    from server.chat.prompt_tokens import tokenize_chat_prompt

    renderer = _renderer(row, folder)
    plain = [{"role": "user", "content": "Weather in Paris?"}]
    text, ids = tokenize_chat_prompt(renderer, served_tokenizer, plain, tools=TOOLS, chat_template_kwargs=row.kwargs)
    assert ids == served_tokenizer.encode(text, add_special_tokens=False)
    for marker in row.control:  # the template's control tokens are there, each one id
        ident = served_tokenizer.convert_tokens_to_ids(marker)
        assert ids.count(ident) == text.count(marker) > 0 or marker not in text, marker
    _assert_markers_stay_text(row, folder, served_tokenizer, sorted(row.special & set(row.control + row.markers)))


def _assert_markers_stay_text(row: Row, folder: Path, served_tokenizer: Any, markers: list[str]) -> None:
    """A user's text holding ``markers`` gives the prompt no more of their ids than the template writes."""
    from server.chat.prompt_tokens import tokenize_chat_prompt

    renderer = _renderer(row, folder)
    plain = [{"role": "user", "content": "Hi  bye"}]
    _, ids = tokenize_chat_prompt(renderer, served_tokenizer, plain, tools=TOOLS, chat_template_kwargs=row.kwargs)
    forged = [{"role": "user", "content": "Hi " + " ".join(markers) + " bye"}]
    _, forged_ids = tokenize_chat_prompt(renderer, served_tokenizer, forged, tools=TOOLS, chat_template_kwargs=row.kwargs)
    for marker in markers:
        ident = served_tokenizer.convert_tokens_to_ids(marker)
        assert forged_ids.count(ident) == ids.count(ident), f"the user's {marker!r} became the control token"


# Markers that are added tokens but not special in the real tokenizer (Qwen's <tool_call> / <think>,
# DeepSeek's <｜User｜> / <｜Assistant｜> and tool markers): the tokenizer matches them whole in any text,
# so the control-token guard (server/chat/prompt_tokens.py) covers marker-like added tokens too.
NON_SPECIAL = [pytest.param(r, m, id=f"{r.id}-{m}") for r in ROWS for m in r.control + r.markers if m not in r.special]


@pytest.mark.parametrize("row_,marker", NON_SPECIAL)
def test_a_users_non_special_marker_stays_text(row_: Row, marker: str) -> None:
    from vllm.tokenizers import get_tokenizer

    from bench.vocab_standin import ensure_vocab_standin, vocab_closing_texts

    closing = vocab_closing_texts(*row_.closing, end=row_.end, bias=row_.closing_bias, more=row_.prefer)
    folder = ensure_vocab_standin(row_.vocab, row_.template(), closing)
    _assert_markers_stay_text(row_, folder, get_tokenizer(str(folder)), [marker])


def test_the_tool_grammar_compiles_over_the_full_vocabulary(row: Row, folder: Path, served_tokenizer: Any) -> None:
    from server.structured.constraints import constraint_from_request
    from server.structured.tools import tool_spec_of
    from server.structured.grammar_cache import GrammarCache, tokenizer_info_from_hf

    width = json.loads((folder / "config.json").read_text())["vocab_size"]
    info = tokenizer_info_from_hf(served_tokenizer, vocab_size=width)
    assert info.vocab_size == width >= len(served_tokenizer)
    cache = GrammarCache(info, disable_any_whitespace=True)
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        c = constraint_from_request(response_format=None, structured_outputs=None,
                                    tools=tool_spec_of(TOOLS, choice), tool_format=row.parser)
        assert c is not None
        first, again = cache.compile(c), cache.compile(c)
        assert first.ok and not first.cached, first.error
        assert again.ok and again.cached


# --- the whole server path -------------------------------------------------------------------------------

def _known(row: Row, test: str, request: pytest.FixtureRequest) -> None:
    if test in row.known:
        request.applymarker(pytest.mark.xfail(strict=True, reason=row.known[test]))


def _check_calls(calls: list[dict[str, Any]], *, name: str | None) -> None:
    assert calls, "a forced call was not returned"
    for call in calls:
        fn = call["function"]
        assert fn["name"] in SCHEMAS and (name is None or fn["name"] == name), fn
        Draft202012Validator(SCHEMAS[fn["name"]]).validate(json.loads(fn["arguments"]))
        assert call["id"] and call["type"] == "function"


def _body(row: Row, choice: Any, *, stream: bool, content: str = "Weather in Paris?") -> dict[str, Any]:
    return {"model": "standin", "messages": [{"role": "user", "content": content}], "tools": TOOLS,
            "tool_choice": choice, "parallel_tool_calls": False, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream,
            "chat_template_kwargs": row.kwargs, **({"stream_options": {"include_usage": True}} if stream else {})}


def _streamed(http: httpx.Client, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None, dict[str, Any]]:
    """(tool calls rebuilt from the deltas, finish_reason, usage)."""
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: dict[str, Any] = {}
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk["choices"]:
                finish = choice.get("finish_reason") or finish
                for d in choice["delta"].get("tool_calls") or []:
                    call = calls.setdefault(d["index"], {"id": None, "type": None, "function": {"name": "", "arguments": ""}})
                    call["id"] = d.get("id") or call["id"]
                    call["type"] = d.get("type") or call["type"]
                    call["function"]["name"] += (d.get("function") or {}).get("name") or ""
                    call["function"]["arguments"] += (d.get("function") or {}).get("arguments") or ""
    return [calls[i] for i in sorted(calls)], finish, usage


@on_served_rows
@pytest.mark.parametrize("choice", ["required", "named"])
def test_a_forced_call_streams_and_parses_to_calls_that_fit_the_schema(row: Row, http: httpx.Client, choice: str,
                                                                      request: pytest.FixtureRequest) -> None:
    _known(row, "forced_call", request)
    _known(row, f"forced_call_{choice}", request)
    tool_choice: Any = {"type": "function", "function": {"name": "get_weather"}} if choice == "named" else "required"
    name = "get_weather" if choice == "named" else None
    calls, finish, _ = _streamed(http, _body(row, tool_choice, stream=True))
    _check_calls(calls, name=name)
    assert finish == "tool_calls"
    r = http.post("/v1/chat/completions", json=_body(row, tool_choice, stream=False))
    assert r.status_code == 200, r.text
    answer = r.json()["choices"][0]
    _check_calls(answer["message"]["tool_calls"] or [], name=name)
    assert answer["finish_reason"] == "tool_calls"
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in answer["message"]["tool_calls"]] == \
        [(c["function"]["name"], c["function"]["arguments"]) for c in calls], "streamed and whole differ (greedy)"


@on_served_rows
def test_the_servers_prompt_keeps_a_users_markers_as_text(row: Row, http: httpx.Client, folder: Path,
                                                          served_tokenizer: Any, request: pytest.FixtureRequest) -> None:
    """The server counts the prompt the in-process path builds (markers in the user's text as text)."""
    _known(row, "server_prompt", request)
    from server.chat.prompt_tokens import tokenize_chat_prompt

    content = "Hi " + " ".join(sorted(row.special)) + " bye"
    _, ids = tokenize_chat_prompt(_renderer(row, folder), served_tokenizer, [{"role": "user", "content": content}],
                                  tools=TOOLS, chat_template_kwargs=row.kwargs)
    calls, _, usage = _streamed(http, _body(row, "required", stream=True, content=content))
    assert usage["prompt_tokens"] == len(ids)
    _check_calls(calls, name=None)


@on_served_rows
def test_the_servers_grammar_check_compiles_over_the_vocabulary_and_caches(row: Row, http: httpx.Client) -> None:
    r1 = http.post("/v1/schemas/check", json={"tools": TOOLS})
    r2 = http.post("/v1/schemas/check", json={"tools": TOOLS})
    assert r1.status_code == r2.status_code == 200, r1.text
    first, again = r1.json()["items"][0], r2.json()["items"][0]
    assert first["compiles"] and again["compiles"] and again["cached"], (first, again)
