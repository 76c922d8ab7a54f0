"""End-to-end: the OpenAI SDK against the real server (real vLLM, real SmolLM2)."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.sse_validator import validate_sse

from evals.margins import RELIED

from .conftest import API_KEY

pytestmark = pytest.mark.e2e

HI = [{"role": "user", "content": "What is the capital of France?"}]  # no test relies on its exact answer
CAPITAL = RELIED["capital"]  # one that tests rely on: its margins are checked (evals/margins.py)


def test_greedy_answer_is_coherent_english(client, model):
    # A prompt whose greedy answer leads by >= MIN_MARGIN nat at every step (evals/margins.py):
    # the same words on every CPU and dtype.
    r = client.chat.completions.create(model=model, messages=CAPITAL.as_messages, temperature=0, max_tokens=30)
    text = r.choices[0].message.content
    assert text.startswith(CAPITAL.expect), text
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.id.startswith("chatcmpl-") and r.object == "chat.completion" and r.model == model


def _sse_events(raw: str) -> list[dict]:
    return [json.loads(x[6:]) for x in raw.split("\n\n") if x.startswith("data: {")]


def test_stream_matches_non_stream_and_sse_rules(http, model):
    body = {"model": model, "messages": HI, "temperature": 0, "max_tokens": 30}
    # Within one stream: the text is exactly the tokens it reports, as many as its usage counts.
    raw = http.post("/v1/chat/completions", json={**body, "stream": True, "logprobs": True,
                                                   "stream_options": {"include_usage": True}})
    assert raw.headers["content-type"].startswith("text/event-stream")
    rec = validate_sse(raw.text, expect_usage=True, n=1)
    tokens = [item["token"] for ev in _sse_events(raw.text) for ch in ev["choices"]
              for item in ((ch.get("logprobs") or {}).get("content") or [])]
    assert rec.usage["completion_tokens"] == len(tokens)
    if rec.finish_reason[0] == "stop":  # the end-of-turn token is counted and reported, never shown
        assert tokens[-1] in ("<|im_end|>", "<|endoftext|>"), tokens[-1]
        tokens = tokens[:-1]
    assert rec.content[0] and rec.content[0] == "".join(tokens)
    # Across requests, the same text only where a constraint fixes it (batches differ between requests).
    fixed = {**body, "structured_outputs": {"regex": r"The capital of France is Paris\."}}
    plain = http.post("/v1/chat/completions", json=fixed).json()
    streamed = validate_sse(http.post("/v1/chat/completions", json={**fixed, "stream": True,
                                                                      "stream_options": {"include_usage": True}}).text,
                            expect_usage=True, n=1)
    assert streamed.content[0] == plain["choices"][0]["message"]["content"] == "The capital of France is Paris."
    assert streamed.finish_reason[0] == plain["choices"][0]["finish_reason"] == "stop"
    assert streamed.usage["completion_tokens"] == plain["usage"]["completion_tokens"]
    no_usage = http.post("/v1/chat/completions", json={**body, "stream": True})
    validate_sse(no_usage.text, expect_usage=False, n=1)


def test_sdk_streaming(client, model):
    stream = client.chat.completions.create(model=model, messages=HI, temperature=0, max_tokens=20, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    assert chunks[-1].usage is not None and chunks[-1].choices == []


def test_max_tokens_and_max_completion_tokens_give_length(client, model):
    for kw in ({"max_tokens": 5}, {"max_completion_tokens": 5}):
        r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Tell me a long story."}],
                                           temperature=0, **kw)
        assert r.choices[0].finish_reason == "length"
        assert r.usage.completion_tokens == 5


def test_stop_sequence(client, model):
    r = client.chat.completions.create(model=model, messages=CAPITAL.as_messages, temperature=0, max_tokens=30,
                                       stop=["Paris"])
    assert CAPITAL.expect.startswith("The capital of France is Paris")
    assert r.choices[0].message.content.startswith("The capital of France is")
    assert "Paris" not in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"


def test_n_seed_penalties_user(client, model):
    kw = dict(model=model, messages=[{"role": "user", "content": "Name a fruit."}], temperature=1.0,
              max_tokens=12, seed=1234, presence_penalty=0.5, frequency_penalty=0.5, user="u-1")
    a = client.chat.completions.create(n=3, **kw)
    assert [c.index for c in a.choices] == [0, 1, 2]
    b = client.chat.completions.create(n=1, **kw)
    c = client.chat.completions.create(n=1, **kw)
    assert b.choices[0].message.content == c.choices[0].message.content  # same seed, same text


def test_n_streamed(http, model):
    raw = http.post("/v1/chat/completions", json={"model": model, "messages": HI, "n": 2, "max_tokens": 8,
                                                  "stream": True}).text
    rec = validate_sse(raw, n=2)
    assert set(rec.content) == {0, 1}


def test_logprobs(client, model):
    r = client.chat.completions.create(model=model, messages=CAPITAL.as_messages, temperature=0, max_tokens=5,
                                       logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    assert len(lp) == 5
    for item in lp:
        assert item.logprob <= 0 and len(item.top_logprobs) == 3
        assert item.top_logprobs[0].logprob >= item.top_logprobs[-1].logprob
        assert bytes(item.bytes).decode("utf-8") == item.token  # this answer is ASCII words
    # greedy: the chosen token is the most likely one
    assert lp[0].token == lp[0].top_logprobs[0].token
    assert "".join(i.token for i in lp) == r.choices[0].message.content


def test_content_parts(client, model):
    r = client.chat.completions.create(model=model, temperature=0, max_tokens=20, messages=[
        {"role": "system", "content": [{"type": "text", "text": "You answer briefly."}]},
        {"role": "user", "content": [{"type": "text", "text": "What is the capital of "}, {"type": "text", "text": "France?"}]},
    ])
    assert r.choices[0].message.content


def test_completions_endpoint(client, model, http):
    r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=5, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text
    assert r.usage.completion_tokens <= 5
    e = client.completions.create(model=model, prompt="Hello", max_tokens=3, temperature=0, echo=True, logprobs=2)
    assert e.choices[0].text.startswith("Hello")
    assert len(e.choices[0].logprobs.tokens) == e.usage.completion_tokens
    # streamed against not: the same text where a constraint fixes it (batches differ between requests)
    fixed = {"model": model, "prompt": "The capital of France is", "max_tokens": 5, "temperature": 0,
             "structured_outputs": {"regex": " Paris\\."}}
    plain = http.post("/v1/completions", json=fixed).json()
    s = http.post("/v1/completions", json={**fixed, "stream": True}).text
    events = _sse_events(s)
    assert "".join(ev["choices"][0]["text"] for ev in events) == plain["choices"][0]["text"] == " Paris."
    assert s.endswith("data: [DONE]\n\n")


def test_models(client, model, http):
    ids = [m.id for m in client.models.list().data]
    assert ids == [model]
    assert http.get(f"/v1/models/{model}").json()["id"] == model
    assert http.get("/v1/models/nope").status_code == 404


def test_concurrent_requests_all_answered(client, model):
    def one(i):
        return client.chat.completions.create(model=model, messages=[{"role": "user", "content": f"Say {i}"}],
                                              max_tokens=8, temperature=0)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    assert all(r.choices[0].finish_reason in ("stop", "length") for r in results)


# ---------------------------------------------------------------- errors

def _err(resp: httpx.Response, status: int, code: str | None = None, param: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"]
    if code is not None:
        assert err["code"] == code, err
    if param is not None:
        assert err["param"] == param, err
    return err


def test_malformed_json(http):
    r = http.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    _err(r, 400, "invalid_json")


def test_missing_and_empty_messages(http, model):
    _err(http.post("/v1/chat/completions", json={"model": model}), 400, "missing_required_parameter", "messages")
    _err(http.post("/v1/chat/completions", json={"model": model, "messages": []}), 400, param="messages")


def test_unknown_model_404(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-9", messages=HI)
    assert e.value.body["code"] == "model_not_found"


@pytest.mark.parametrize("field,value", [("temperature", 3), ("top_p", 0), ("n", 0), ("max_tokens", 0),
                                         ("presence_penalty", 5), ("top_logprobs", 50)])
def test_out_of_range(http, model, field, value):
    body = {"model": model, "messages": HI, field: value}
    if field == "top_logprobs":
        body["logprobs"] = True
    _err(http.post("/v1/chat/completions", json=body), 400, param=field)


def test_context_length_exceeded(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hello " * 5000}])
    assert e.value.body["code"] == "context_length_exceeded"
    assert "2048" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=HI, max_tokens=4000)
    assert e.value.body["code"] == "context_length_exceeded"


def test_bad_api_key(server, model):
    from openai import OpenAI

    bad = OpenAI(base_url=server.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.chat.completions.create(model=model, messages=HI)
    assert e.value.body["code"] == "invalid_api_key"
    assert httpx.get(server.base + "/health").status_code == 200  # open


def test_disconnect_aborts_and_server_stays_up(server, http, model):
    def disconnects() -> float:
        for line in http.get("/metrics").text.splitlines():
            if line.startswith("gramserve_client_disconnects_total "):
                return float(line.split()[1])
        return 0.0

    before = disconnects()
    with httpx.Client(base_url=server.base, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60) as c:
        with c.stream("POST", "/v1/chat/completions", json={
                "model": model, "messages": HI, "max_tokens": 1500, "ignore_eos": True, "stream": True}) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i > 6:
                    break
    import time

    for _ in range(50):
        if disconnects() > before:
            break
        time.sleep(0.1)
    assert disconnects() == before + 1
    # the engine is free again: a new request completes promptly
    ok = http.post("/v1/chat/completions", json={"model": model, "messages": HI, "max_tokens": 5})
    assert ok.status_code == 200


def test_metrics_exposed(http, model):
    from server.metrics import METRIC_NAMES

    http.post("/v1/chat/completions", json={"model": model, "messages": HI, "max_tokens": 3})
    text = http.get("/metrics").text
    missing = [n for n in METRIC_NAMES if n not in text]
    assert not missing, missing
    assert 'gramserve_requests_total{endpoint="/v1/chat/completions",status="200"}' in text
    assert "vllm:" in text  # the engine's own metrics beside ours


def test_engine_metrics_count_generated_tokens(http, model):
    """vLLM's Prometheus logger runs without its log-line logger (server/engine/vllm_engine.py):
    its counters must still move with each request."""
    def generated() -> float:
        total = 0.0
        for line in http.get("/metrics").text.splitlines():
            if line.startswith("vllm:generation_tokens_total{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    before = generated()
    r = http.post("/v1/chat/completions", json={"model": model, "messages": HI, "max_tokens": 4, "ignore_eos": True})
    assert r.status_code == 200
    assert generated() == before + 4


def test_grafana_dashboard_metrics_exist_on_live_metrics(http, model):
    from tests.unit.test_deploy import dashboard_metric_names

    http.post("/v1/chat/completions", json={"model": model, "messages": HI, "max_tokens": 3})
    exposed = set()
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            exposed.add(name + "_total" if kind == "counter" and not name.endswith("_total") else name)
    missing = sorted(n for n in dashboard_metric_names() if n not in exposed)
    assert not missing, f"the dashboard queries metrics /metrics does not expose: {missing}"


def test_n_greedy_choices_are_served(client, model):
    """vLLM refuses n>1 for greedy sampling; OpenAI serves it: n identical greedy choices."""
    r = client.chat.completions.create(model=model, messages=HI, temperature=0, max_tokens=8, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert len({c.message.content for c in r.choices}) == 1 and r.choices[0].message.content
    stream = client.chat.completions.create(model=model, messages=HI, temperature=0, max_tokens=8, n=2, stream=True)
    texts = {0: "", 1: ""}
    for chunk in stream:
        for ch in chunk.choices:
            texts[ch.index] += ch.delta.content or ""
    assert texts[0] == texts[1] and texts[0]  # the choices of one request agree


def test_logit_bias_is_applied(client, model):
    """+100 on one token makes greedy decoding pick it; -100 keeps it out (never silently ignored)."""
    import transformers

    from server.default_model import ensure_default_model

    tok = transformers.AutoTokenizer.from_pretrained(str(ensure_default_model(progress=False)))
    banana = tok.encode("banana", add_special_tokens=False)[0]
    forced = client.chat.completions.create(model=model, messages=CAPITAL.as_messages, temperature=0, max_tokens=3,
                                            logit_bias={str(banana): 100})
    assert forced.choices[0].message.content.startswith(tok.decode([banana]))
    plain = client.chat.completions.create(model=model, messages=CAPITAL.as_messages, temperature=0, max_tokens=3)
    first = tok.encode(plain.choices[0].message.content, add_special_tokens=False)[0]
    banned = client.chat.completions.create(model=model, messages=CAPITAL.as_messages, temperature=0, max_tokens=3,
                                            logit_bias={str(first): -100})
    assert tok.encode(banned.choices[0].message.content, add_special_tokens=False)[0] != first
