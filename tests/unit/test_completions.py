"""The completions API (server/plan: build, run loop, completions framer) and /v1/models over HTTP."""
from __future__ import annotations

from server.engine.fake import CharTokenizer
from tests.unit._front import HELLO, events as _events, script as _script


# --------------------------------------------------------------------------- /v1/completions, /v1/models


def test_completions_text(make_app):
    b = make_app()
    r = b.client().post("/v1/completions", json={"model": "fake-model", "prompt": "Say", "max_tokens": 50})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "text_completion" and body["model"] == "fake-model"
    assert body["id"].startswith("cmpl-")
    assert body["choices"] == [{"index": 0, "text": HELLO, "logprobs": None, "finish_reason": "stop"}]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": len(HELLO), "total_tokens": 3 + len(HELLO)}
    assert CharTokenizer().decode(b.engine.requests[-1].prompt_token_ids) == "Say"


def test_completions_default_max_tokens_16_and_length(make_app):
    b = make_app(script=_script(["a" * 30]))
    body = b.client().post("/v1/completions", json={"prompt": "Say"}).json()
    assert b.engine.requests[-1].sampling.max_tokens == 16
    assert body["choices"][0]["text"] == "a" * 16 and body["choices"][0]["finish_reason"] == "length"


def test_completions_echo_and_logprobs(make_app):
    b = make_app()
    body = b.client().post("/v1/completions", json={"prompt": "Say", "echo": True, "logprobs": 2,
                                                    "max_tokens": 50}).json()
    [choice] = body["choices"]
    assert choice["text"] == "Say" + HELLO
    lp = choice["logprobs"]
    assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert lp["tokens"] == list(HELLO)
    assert lp["token_logprobs"] == [-0.5] * len(HELLO)
    assert lp["top_logprobs"] == [{}] * len(HELLO)
    assert lp["text_offset"] == list(range(3, 3 + len(HELLO)))  # offsets count the echoed prompt
    assert b.engine.requests[-1].sampling.logprobs == 2


def test_completions_prompt_list_and_token_ids(make_app):
    b = make_app()
    c = b.client()
    body = c.post("/v1/completions", json={"prompt": ["a", "bb"], "max_tokens": 50}).json()
    assert [ch["index"] for ch in body["choices"]] == [0, 1]
    assert body["usage"]["prompt_tokens"] == 3
    body = c.post("/v1/completions", json={"prompt": [72, 105], "max_tokens": 50, "echo": True}).json()
    assert body["choices"][0]["text"] == "Hi" + HELLO
    assert b.engine.requests[-1].prompt_token_ids == [72, 105]


def test_completions_stream(make_app):
    b = make_app()
    with b.client().stream("POST", "/v1/completions", json={
            "prompt": "Say", "echo": True, "stream": True, "max_tokens": 50,
            "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = "".join(r.iter_text())
    events = _events(raw)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(e["object"] == "text_completion" for e in chunks)
    assert len({e["id"] for e in chunks}) == 1
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == len(HELLO)
    texts = [ch["text"] for e in chunks[:-1] for ch in e["choices"]]
    assert "".join(texts) == "Say" + HELLO
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert all(ch["finish_reason"] is None for e in chunks[:-2] for ch in e["choices"])


def test_models_list_and_get(make_app):
    c = make_app(max_model_len=2048).client()
    body = c.get("/v1/models").json()
    assert body["object"] == "list"
    [card] = body["data"]
    assert card["id"] == "fake-model" and card["object"] == "model" and card["max_model_len"] == 2048
    assert isinstance(card["created"], int) and card["owned_by"]
    assert c.get("/v1/models/fake-model").json() == card
    r = c.get("/v1/models/other")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"




def test_an_answer_the_budget_closed_is_marked(make_app):
    """Budget-aware closing on /v1/completions: a strict answer the budget ended but the grammar
    closed is marked ``closed_by_budget`` on its choice (and on the streamed last chunk); an
    answer cut open, or closing turned off, is not."""
    answer = '{"a":1}'
    rf = {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}}}
    b = make_app(script=_script([answer, "zzz"]))
    body = {"prompt": "Hi", "response_format": rf, "max_tokens": len(answer)}
    choice = b.client().post("/v1/completions", json=body).json()["choices"][0]
    assert (choice["text"], choice["finish_reason"], choice.get("closed_by_budget")) == (answer, "length", True)
    assert b.engine.requests[-1].constraint.closes
    with b.client().stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
        chunks = [e for e in _events("".join(r.iter_text())) if e != "[DONE]"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["choices"][0]["closed_by_budget"] is True
    assert all("closed_by_budget" not in c["choices"][0] for c in chunks[:-1])
    off = b.client().post("/v1/completions", json={**body, "close_within_budget": False}).json()["choices"][0]
    assert off["finish_reason"] == "length" and "closed_by_budget" not in off
    cut = make_app(script=_script(['{"a":', "1}"])).client().post(
        "/v1/completions", json={**body, "max_tokens": 5}).json()["choices"][0]
    assert cut["text"] == '{"a":' and "closed_by_budget" not in cut
