"""The playground at / in headless Chromium, against the real server (session ``server``).

Driven like a user: the API key typed into the settings, models listed, a streamed chat, a
json_schema answer validated in the page, a refused schema's report (REJECTED keyword and its
highlight), a tool call under ``tool_choice: "required"`` answered with a tool result, the stop
button, keyboard-only use and a 420 px wide window. The page's JSON-schema checker is compared
with the ``jsonschema`` package on the keywords it claims to check. Screenshots go to
``$GRAMSERVE_TEST_LOGS/playground`` (else /tmp/gramserve-playground).

Needs Debian's ``chromium`` and ``chromium-driver`` (see the README); Selenium is pointed at
them, so Selenium Manager never downloads a browser.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.sse_validator import validate_sse

from .conftest import API_KEY

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL = "apt-get install -y --no-install-recommends chromium chromium-driver"
WAIT_S = 60  # one generation of <= 64 tokens; generous for a loaded 2-core runner
ARTIFACTS = (Path(os.environ["GRAMSERVE_TEST_LOGS"]) / "playground" if os.environ.get("GRAMSERVE_TEST_LOGS")
             else Path("/tmp/gramserve-playground"))


def _chrome(user_dir: str) -> Any:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        pytest.fail(f"the browser test needs {', '.join(missing)}: install them with `{INSTALL}` "
                    "(as root; see the README's test section)", pytrace=False)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("the browser test needs selenium: pip install -e '.[test]'", pytrace=False)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,1000", f"--user-data-dir={user_dir}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    user_dir = tempfile.mkdtemp(prefix="gramserve-chromium-")
    started = time.perf_counter()
    drv = _chrome(user_dir)
    print(f"\n[playground] chromium started in {time.perf_counter() - started:.1f}s")
    drv.set_script_timeout(30)
    drv.console = []  # browser console entries, drained by console()
    yield drv
    try:
        (ARTIFACTS / "browser-console.log").write_text(
            "\n".join(f"{e['level']} {e['message']}" for e in console(drv)))
    finally:
        drv.quit()
        shutil.rmtree(user_dir, ignore_errors=True)


def console(drv: Any) -> list[dict[str, Any]]:
    """Every browser console entry so far (get_log empties the browser's buffer: keep them)."""
    drv.console += drv.get_log("browser")
    return drv.console


class Page:
    """The playground in the browser, with the few actions the tests need."""

    def __init__(self, drv: Any, base: str) -> None:
        from selenium.webdriver.common.by import By

        self.drv, self.base, self.By = drv, base, By

    def find(self, css: str) -> Any:
        return self.drv.find_element(self.By.CSS_SELECTOR, css)

    def all(self, css: str) -> list[Any]:
        return self.drv.find_elements(self.By.CSS_SELECTOR, css)

    def wait(self, what: Callable[[], Any], message: str, timeout: float = WAIT_S) -> Any:
        from selenium.webdriver.support.ui import WebDriverWait

        try:
            return WebDriverWait(self.drv, timeout, poll_frequency=0.1).until(lambda _: what())
        except Exception:
            self.shot("FAILED-" + re.sub(r"\W+", "-", message)[:60])
            raise AssertionError(f"{message} (waited {timeout}s); page log: {self.log_text()[-1500:]}")

    def log_text(self) -> str:
        return self.find("#log").text

    def shot(self, name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        self.drv.save_screenshot(str(path))
        return path

    def set_value(self, css: str, value: str) -> None:
        """Replace a field's text the way a user would (select all, type)."""
        from selenium.webdriver.common.keys import Keys

        el = self.find(css)
        self.drv.execute_script("arguments[0].scrollIntoView({block: 'center'})", el)
        el.send_keys(Keys.CONTROL, "a")
        el.send_keys(Keys.DELETE)
        el.send_keys(value)

    def select(self, css: str, *, value: str) -> None:
        from selenium.webdriver.support.ui import Select

        Select(self.find(css)).select_by_value(value)

    def click(self, css: str) -> None:
        el = self.find(css)
        self.drv.execute_script("arguments[0].scrollIntoView({block: 'center'})", el)
        el.click()

    def reset(self, *, mode: str, max_tokens: int = 48) -> None:
        """A fresh conversation in ``mode`` (text, json, tools), temperature 0."""
        self.click("#clear")
        self.click(f"#mode-{mode}")
        self.set_value("#temperature", "0")
        self.set_value("#max-tokens", str(max_tokens))

    def record_streams(self) -> None:
        """Tee every chat response body the page reads into ``window.__sse`` (its raw SSE text)."""
        self.drv.execute_script("""
            if (window.__teeing) return;
            window.__teeing = true; window.__sse = [];
            const real = window.fetch;
            window.fetch = async (...args) => {
              const response = await real(...args);
              if (!String(args[0]).includes("/v1/chat/completions") || !response.body) return response;
              const [mine, theirs] = response.body.tee();
              (async () => {
                const reader = theirs.getReader(), decoder = new TextDecoder();
                let text = "";
                try {
                  for (;;) { const {done, value} = await reader.read(); if (done) break;
                             text += decoder.decode(value, {stream: true}); }
                } catch (e) { text += " [aborted: " + e.name + "]"; }  // the stop button: the page's own read fails too
                window.__sse.push(text);
              })();
              return new Response(mine, {status: response.status, statusText: response.statusText,
                                         headers: response.headers});
            };""")

    def send(self, text: str) -> None:
        self.set_value("#prompt", text)
        self.click("#send")

    def answers(self) -> list[Any]:
        return self.all(".turn.assistant")

    def wait_answer(self, n: int = 1) -> Any:
        """The n-th assistant card once its stats line says how it finished."""
        self.wait(lambda: len(self.answers()) >= n and self.answers()[n - 1].find_elements(
            self.By.CSS_SELECTOR, ".finish-reason"), f"assistant answer {n} finished")
        return self.answers()[n - 1]


@pytest.fixture(scope="module")
def page(server, driver) -> Page:
    p = Page(driver, server.base)
    driver.get(server.base + "/")
    # A fresh browser holds no key: /v1/models answers 401, shown as the OpenAI envelope.
    p.wait(lambda: "invalid_api_key" in p.find("#models-error").text, "401 envelope shown before the key")
    assert p.find("#settings").get_attribute("open") is not None, "settings open themselves on a 401"
    p.shot("01-no-key")
    p.set_value("#api-key", API_KEY)
    p.click("#save-key")
    p.wait(lambda: p.all("#model option"), "models listed after the key")
    return p


def test_page_lists_the_models(page, model):
    options = [o.get_attribute("value") for o in page.all("#model option")]
    assert options == [model]
    assert page.find("#models-error").text == ""
    assert page.drv.execute_script("return localStorage.getItem('gramserve.playground.apiKey')") == API_KEY
    assert page.drv.title == "gramserve playground"
    page.shot("02-models")


def test_stream_chat(page):
    page.reset(mode="text", max_tokens=32)
    page.record_streams()
    page.send("Say hello in one short sentence.")
    card = page.wait_answer()
    text = card.find_element(page.By.CSS_SELECTOR, ".content").text
    finish = card.find_element(page.By.CSS_SELECTOR, ".finish-reason").text
    stats = card.find_element(page.By.CSS_SELECTOR, ".stats").text
    page.shot("03-chat")
    assert text.strip(), "the streamed text is shown"
    assert finish in ("stop", "length")
    m = re.search(r"tokens: (\d+) prompt \+ (\d+) completion", stats)
    assert m and 0 < int(m.group(2)) <= 32, stats
    assert re.search(r"TTFT \d+ ms", stats) and re.search(r"[\d.]+ tokens/s", stats), stats
    # The page shows exactly what its own stream carried (the raw SSE body, teed off in the page).
    raw = page.wait(lambda: page.drv.execute_script("return (window.__sse || []).length") and
                    page.drv.execute_script("return window.__sse[window.__sse.length - 1]"), "the stream's raw body")
    rec = validate_sse(raw, n=1)
    assert rec.content[0].strip() == text.strip()
    assert finish == rec.finish_reason[0]


def test_json_schema_answer_is_shown_and_validated(page):
    page.reset(mode="json", max_tokens=64)
    page.select("#schema-example", value="0")  # Person: exact keywords only
    page.wait(lambda: page.all("#schema-report .report-item"), "schema report")
    report = page.find("#schema-report").text
    assert "✓ compiles" in report and "Every keyword is enforced exactly" in report, report
    levels = {cell.text for cell in page.all("#schema-report tbody .level")}
    assert levels == {"EXACT"}, levels
    schema = json.loads(page.find("#schema-text").get_attribute("value"))
    page.send("Describe a fictional person as JSON.")
    card = page.wait_answer()
    page.shot("04-json-schema")
    shown = card.find_element(page.By.CSS_SELECTOR, ".content").text
    value = json.loads(shown)  # the page shows the streamed JSON pretty-printed
    assert shown.strip() == json.dumps(value, indent=2, ensure_ascii=False)
    assert not list(Draft202012Validator(schema).iter_errors(value))
    verdict = card.find_element(page.By.CSS_SELECTOR, ".validation")
    assert "ok" in verdict.get_attribute("class").split() and "fits the schema" in verdict.text, verdict.text
    assert "type, enum, const, properties, required" in verdict.get_attribute("textContent")  # says what it checks


def test_refused_schema_report(page):
    page.reset(mode="json", max_tokens=16)
    page.select("#schema-example", value="2")  # uniqueItems: neither XGrammar nor llguidance enforces it
    page.wait(lambda: page.all("#schema-report tr.level-loose"), "LOOSE row in the report")
    row = page.find("#schema-report tr.level-loose").text
    assert "uniqueItems" in row and "/properties/tags" in row and "LOOSE" in row, row
    report = page.find("#schema-report").text
    assert "strict: true would be refused" in report and "no backend enforces it exactly" in report, report
    assert "uniqueItems at /properties/tags (llguidance:" in report, report
    key = page.find('#schema-report .schema-view [data-ptr="/properties/tags/uniqueItems"]')
    assert "hl-loose" in key.get_attribute("class").split()
    page.drv.execute_script("arguments[0].scrollIntoView({block: 'center'})", key)
    page.shot("05-refused-schema-report")
    was_strict = page.find("#schema-strict").is_selected()
    if not was_strict:
        page.click("#schema-strict")
    page.send("Give a few tags as JSON.")  # the strict request itself: answered 400, shown as the envelope
    page.wait(lambda: page.all(".turn.assistant .error-envelope"), "error envelope for the refused schema")
    envelope = page.find(".turn.assistant .error-envelope").text
    assert "HTTP 400" in envelope and "invalid_request_error" in envelope
    assert "response_format.json_schema.schema" in envelope, envelope
    assert page.find("#prompt").get_attribute("value") == "Give a few tags as JSON.", "the unsent prompt comes back"
    page.shot("06-refused-schema-request")
    if not was_strict:
        page.click("#schema-strict")  # leave it as the next test expects


def test_tool_call_required_and_tool_result(page):
    page.reset(mode="tools", max_tokens=64)
    page.select("#tools-example", value="0")  # get_weather
    page.wait(lambda: page.all("#tools-report .report-item"), "tools report")
    page.select("#tool-choice", value="required")
    page.send("What is the weather in Paris?")
    card = page.wait_answer()
    page.shot("07-tool-call")
    calls = card.find_elements(page.By.CSS_SELECTOR, ".tool-call")
    assert calls, card.text
    call = calls[0]
    assert call.find_element(page.By.CSS_SELECTOR, ".tool-name").text == "get_weather"
    args = json.loads(call.find_element(page.By.CSS_SELECTOR, ".tool-args").text)
    tools = json.loads(page.find("#tools-text").get_attribute("value"))
    assert not list(Draft202012Validator(tools[0]["function"]["parameters"]).iter_errors(args))
    verdict = call.find_element(page.By.CSS_SELECTOR, ".validation")
    assert "ok" in verdict.get_attribute("class").split(), verdict.text
    assert card.find_element(page.By.CSS_SELECTOR, ".finish-reason").text in ("tool_calls", "length")
    # Answer the call (Ctrl+Enter in the result box) with tool_choice none: the model answers in text.
    from selenium.webdriver.common.keys import Keys

    page.select("#tool-choice", value="none")
    box = card.find_element(page.By.CSS_SELECTOR, ".tool-answers textarea")
    box.send_keys('{"temperature_c": 21, "sky": "clear"}')
    box.send_keys(Keys.CONTROL, Keys.ENTER)
    second = page.wait_answer(2)
    page.shot("08-tool-result-answer")
    whos = [w.get_attribute("textContent") for w in page.all(".turn.user .who")]
    assert whos == ["You", "Tool result · get_weather"], whos
    assert second.find_element(page.By.CSS_SELECTOR, ".finish-reason").text in ("stop", "length")
    assert not second.find_elements(page.By.CSS_SELECTOR, ".error-envelope"), second.text


def test_stop_button_aborts(page, http):
    page.reset(mode="text", max_tokens=1500)  # long enough that only the stop button ends it early
    page.send("Write a long story about a lighthouse keeper.")
    page.wait(lambda: page.answers() and page.answers()[0].find_element(page.By.CSS_SELECTOR, ".content").text,
              "first tokens")
    page.click("#stop")
    card = page.wait_answer()
    assert card.find_element(page.By.CSS_SELECTOR, ".finish-reason").text == "stopped (you aborted it)"
    assert page.find("#send").is_enabled() and not page.find("#stop").is_enabled()
    page.shot("09-stopped")

    def running() -> float:
        text = http.get("/metrics").text
        return float(re.search(r"^gramserve_requests_running (\S+)$", text, re.M).group(1))

    deadline = time.monotonic() + 15
    while running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running() == 0, "the server stopped generating when the page aborted"


def test_keyboard_only(page):
    """Skip link -> message box, Tab reaches Send next, Enter sends, Shift+Enter adds a line."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    page.drv.get(page.base + "/")  # focus starts at the top of a fresh page
    page.wait(lambda: page.all("#model option"), "models listed (key remembered)")
    page.drv.execute_script("document.getElementById('temperature').value = '0';"
                            "document.getElementById('max-tokens').value = '16';")  # set-up, not the keyboard part
    keys = ActionChains(page.drv)
    keys.send_keys(Keys.TAB).perform()
    active = page.drv.switch_to.active_element
    assert active.get_attribute("class") == "skip", active.get_attribute("outerHTML")
    keys.send_keys(Keys.ENTER).perform()
    page.wait(lambda: page.drv.switch_to.active_element.get_attribute("id") == "prompt", "skip link focuses the message")
    ActionChains(page.drv).send_keys("Name a color.").key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT) \
        .send_keys("One word.").perform()
    assert page.find("#prompt").get_attribute("value") == "Name a color.\nOne word."
    ActionChains(page.drv).send_keys(Keys.TAB).perform()
    assert page.drv.switch_to.active_element.get_attribute("id") == "send"
    ActionChains(page.drv).key_down(Keys.SHIFT).send_keys(Keys.TAB).key_up(Keys.SHIFT).send_keys(Keys.ENTER).perform()
    card = page.wait_answer()
    assert "Name a color.\nOne word." in page.find(".turn.user .content").text
    assert card.find_element(page.By.CSS_SELECTOR, ".content").text.strip()
    labels = page.drv.execute_script("""
        return [...document.querySelectorAll('input:not([type=hidden]):not([hidden]), select, textarea')]
          .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')).map(e => e.id || e.name);""")
    assert labels == [], f"controls without a label: {labels}"
    page.shot("10-keyboard")


def test_narrow_window(page):
    page.drv.set_window_size(420, 900)
    try:
        page.reset(mode="tools", max_tokens=16)
        layout = page.drv.execute_script("""
            const r = (s) => document.querySelector(s).getBoundingClientRect();
            return {scroll: document.documentElement.scrollWidth, width: window.innerWidth,
                    controls: r('.controls'), conversation: r('.conversation'), send: r('#send'), prompt: r('#prompt')};""")
        assert layout["scroll"] <= layout["width"], f"horizontal scroll at 420 px: {layout}"
        assert layout["conversation"]["top"] >= layout["controls"]["bottom"] - 1, "one column when narrow"
        for part in ("send", "prompt"):
            assert 0 <= layout[part]["left"] and layout[part]["right"] <= layout["width"], (part, layout)
        page.click("#mode-text")
        page.send("Say hi.")
        card = page.wait_answer()
        assert card.find_element(page.By.CSS_SELECTOR, ".finish-reason").text in ("stop", "length")
        assert page.drv.execute_script("return document.documentElement.scrollWidth") <= layout["width"]
        page.shot("11-narrow")
    finally:
        page.drv.set_window_size(1280, 1000)


def _frames(*payloads: Any) -> str:
    return "".join(f"data: {json.dumps(p)}\n\n" for p in payloads) + "data: [DONE]\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _scripted_stream(page: Page, sse: str) -> None:
    """The page's next chat request gets ``sse`` as its body (this server's frames, scripted):
    the shapes a server with --reasoning-parser, or one failing mid-stream, sends."""
    page.drv.execute_script("""
        const body = arguments[0], real = window.fetch;
        window.fetch = (url, init) => {
          if (url !== '/v1/chat/completions') return real(url, init);
          window.fetch = real;
          const bytes = new TextEncoder().encode(body);
          const stream = new ReadableStream({start(c) { c.enqueue(bytes.slice(0, 40)); c.enqueue(bytes.slice(40)); c.close(); }});
          return Promise.resolve(new Response(stream, {status: 200, headers: {'content-type': 'text/event-stream'}}));
        };""", sse)


def test_reasoning_pane_and_stream_error(page):
    page.reset(mode="text", max_tokens=16)
    _scripted_stream(page, _frames(
        _chunk({"role": "assistant", "content": "", "reasoning_content": "Paris is "}),
        _chunk({"reasoning_content": "the capital."}),
        _chunk({"content": "Paris."}, "stop"),
        {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [],
         "usage": {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16,
                   "completion_tokens_details": {"reasoning_tokens": 5}}}))
    page.send("Capital of France?")
    card = page.wait_answer()
    assert card.find_element(page.By.CSS_SELECTOR, ".reasoning").is_displayed()
    assert card.find_element(page.By.CSS_SELECTOR, ".reasoning-text").text == "Paris is the capital."
    assert card.find_element(page.By.CSS_SELECTOR, ".content").text == "Paris."
    assert "tokens: 9 prompt + 7 completion" in card.text and "5 reasoning" in card.text
    page.shot("12-reasoning-scripted")
    _scripted_stream(page, _frames(_chunk({"role": "assistant", "content": "Hel"}), {"error": {
        "message": "The engine stopped.", "type": "server_error", "param": None, "code": "engine_dead"}}))
    page.send("Again?")
    card = page.wait_answer(2)
    envelope = card.find_element(page.By.CSS_SELECTOR, ".error-envelope").text
    assert "The engine stopped." in envelope and "engine_dead" in envelope and "server_error" in envelope
    assert not card.find_element(page.By.CSS_SELECTOR, ".reasoning").is_displayed()


# Each case: (schema, instance). The page's verdict must equal jsonschema's on every one.
_CASES: list[tuple[dict[str, Any], Any]] = [
    ({"type": "integer"}, 3), ({"type": "integer"}, 3.5), ({"type": "number"}, 3), ({"type": ["string", "null"]}, None),
    ({"enum": ["a", 1, {"x": [1]}]}, {"x": [1]}), ({"enum": ["a"]}, "b"), ({"const": {"a": 1, "b": 2}}, {"b": 2, "a": 1}),
    ({"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}}, {}),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}, {"a": "x", "b": 1}),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, {"a": 1, "b": "2"}),
    ({"type": "object", "patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False}, {"xa": 1}),
    ({"type": "object", "propertyNames": {"maxLength": 2}}, {"abc": 1}),
    ({"type": "object", "minProperties": 2}, {"a": 1}), ({"type": "object", "maxProperties": 1}, {"a": 1, "b": 2}),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 2}, [1]), ({"type": "array", "maxItems": 1}, [1, 2]),
    ({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"}}, ["a", 1, 2]),
    ({"type": "array", "prefixItems": [{"type": "string"}], "items": False}, ["a", 1]),
    ({"type": "array", "uniqueItems": True}, [{"a": 1}, {"a": 1}]), ({"type": "array", "contains": {"const": 3}}, [1, 2]),
    ({"type": "string", "minLength": 2}, "é"), ({"type": "string", "maxLength": 2}, "😀😀"),
    ({"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}, "ABC-1234"), ({"type": "string", "pattern": "b"}, "abc"),
    ({"type": "string", "pattern": "^b"}, "abc"),
    ({"type": "number", "minimum": 1, "maximum": 2}, 2.5), ({"type": "number", "exclusiveMinimum": 1}, 1),
    ({"type": "number", "exclusiveMaximum": 1}, 0.5), ({"type": "number", "multipleOf": 0.5}, 1.5),
    ({"type": "number", "multipleOf": 0.5}, 1.2),
    ({"type": "integer", "multipleOf": 3}, 10),
    ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, True), ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 1),
    ({"allOf": [{"minimum": 1}, {"maximum": 3}]}, 2), ({"not": {"type": "string"}}, "x"),
    ({"$defs": {"p": {"type": "object", "required": ["n"]}}, "type": "array", "items": {"$ref": "#/$defs/p"}}, [{"n": 1}, {}]),
    ({"type": "object", "properties": {"next": {"$ref": "#"}}}, {"next": {"next": {"next": 1}}}),
]


def _page_validate(page: Page, body: str, *args: Any) -> Any:
    """Runs ``body`` (which sees ``validate`` and ``args``) with the page's own checker, the ES module
    /playground/validator.js (modules keep their names off the page's globals)."""
    result = page.drv.execute_async_script(
        "const done = arguments[arguments.length - 1], args = [...arguments].slice(0, -1);"
        "import('/playground/validator.js').then(({validate}) => done({ok: (" + body + ")}))"
        ".catch((e) => done({error: String(e)}));", *args)
    assert "error" not in result, f"the page's checker did not run: {result['error']}"
    return result["ok"]


def test_page_validator_agrees_with_jsonschema(page):
    verdicts = _page_validate(page, "args[0].map(([s, v]) => validate(s, v).errors.length === 0)",
                              [list(c) for c in _CASES])
    expected = [Draft202012Validator(s).is_valid(v) for s, v in _CASES]
    wrong = [(_CASES[i], verdicts[i]) for i in range(len(_CASES)) if verdicts[i] != expected[i]]
    assert not wrong, f"the page's checker disagrees with jsonschema on: {wrong}"
    assert sum(expected) not in (0, len(expected)), "the cases hold both valid and invalid instances"
    unchecked = _page_validate(page, "[...validate({type: 'string', format: 'date'}, 'x').unchecked]")
    assert unchecked == ["format (date)"], "what the page does not check, it says"


def test_page_needs_no_key_and_sends_security_headers(server):
    r = httpx.get(server.base + "/", timeout=10)
    assert r.status_code == 200 and "default-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"


def test_console_has_no_script_errors(page):
    """Runs last: nothing the page did raised a JS error or hit the CSP; the only failed loads
    are the requests the tests made fail on purpose (401 before the key, 400 refused schema)."""
    entries = console(page.drv)
    bad = [e["message"] for e in entries if re.search(r"Uncaught|Content Security Policy|Refused to", e["message"])]
    assert not bad, bad
    failed = [e["message"] for e in entries if "Failed to load resource" in e["message"]]
    assert all(re.search(r"/v1/models - .*status of 401|/v1/chat/completions - .*status of 400", m) for m in failed), failed
