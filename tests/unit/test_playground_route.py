"""server/api/routes/playground.py: the page at /, its static files, --no-playground, and the
page's promises (public, self-contained: no external origin anywhere in the files)."""
from __future__ import annotations

import re
from importlib import resources

import pytest

from server.config import Settings, settings_from_args
from server.api.routes.playground import PAGE_PATHS

#: The page's script: app.js, an ES module, and the modules it imports (plain files, no build step).
JS = ("app.js", "api.js", "chat.js", "dom.js", "examples.js", "report.js", "sse.js", "validator.js")
FILES = ("index.html", "style.css") + JS
#: served path -> file; every one is public (no key needed).
PAGE_FILE = {"/": "index.html", "/playground/style.css": "style.css", **{f"/playground/{n}": n for n in JS}}
MEDIA = {"html": "text/html", "js": "text/javascript", "css": "text/css"}


@pytest.fixture
def keyed(make_app):
    return make_app(settings=Settings(api_keys=("k1",)))


def _text(name: str) -> str:
    return resources.files("server.api").joinpath("playground", name).read_text()


@pytest.mark.parametrize("path", sorted(PAGE_FILE))
def test_page_served_without_key(keyed, path):
    r = keyed.client().get(path)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].split(";")[0] == MEDIA[PAGE_FILE[path].rsplit(".", 1)[1]]
    assert r.headers["x-content-type-options"] == "nosniff"
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert r.content == resources.files("server.api").joinpath("playground", PAGE_FILE[path]).read_bytes()


def test_page_paths_are_the_served_files():
    assert set(PAGE_PATHS) == set(PAGE_FILE)


def test_every_shipped_file_is_served():
    """The package's playground folder holds exactly the served files: none left unserved, none missing."""
    shipped = {f.name for f in resources.files("server.api").joinpath("playground").iterdir() if f.is_file()}
    assert shipped == set(FILES)


def test_page_does_not_open_the_api(keyed):
    c = keyed.client()
    assert c.get("/v1/models").status_code == 401
    assert c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}).status_code == 401
    assert c.get("/v1/models", headers={"Authorization": "Bearer k1"}).status_code == 200


def test_page_is_not_a_generation_request(keyed):
    """Loading the page never takes a concurrency slot and never reaches the engine."""
    c = keyed.client()
    for path in PAGE_FILE:
        assert c.get(path).status_code == 200
    assert keyed.state.in_flight == 0
    assert keyed.engine.requests == []


@pytest.mark.parametrize("path", ["/playground/index.html", "/playground/../server/config.py", "/playground/x.js",
                                  "/playground/%2e%2e%2fconfig.py", "/playground/app.js.map", "/app.js",
                                  "/playground/sub/app.js"])
def test_only_the_listed_files(keyed, path):
    r = keyed.client().get(path)
    assert r.status_code in (401, 404), r.text  # unknown /playground/ paths are not public (401) or not there
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_unknown_playground_file_is_404_with_key(keyed):
    r = keyed.client().get("/playground/nope.js", headers={"Authorization": "Bearer k1"})
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "not_found"


def test_no_playground_turns_it_off(make_app):
    built = make_app(settings=Settings(playground=False))
    c = built.client()
    for path in PAGE_FILE:
        r = c.get(path)
        assert r.status_code == 404, path
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}
        assert err["code"] == "not_found" and "--no-playground" in err["message"]
    assert c.get("/health").status_code == 200


def test_flag_and_environment(monkeypatch):
    assert settings_from_args([]).playground is True
    assert settings_from_args(["--no-playground"]).playground is False
    monkeypatch.setenv("GRAMSERVE_NO_PLAYGROUND", "1")
    assert settings_from_args([]).playground is False


def test_page_not_in_openapi(make_app):
    paths = make_app().client().get("/openapi.json").json()["paths"]
    assert "/" not in paths and not any(p.startswith("/playground") for p in paths)


_URL = re.compile(r"""(?:https?:|wss?:|ftp:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}""")


@pytest.mark.parametrize("name", FILES)
def test_no_external_urls(name):
    """Works offline and leaks nothing: no URL with a host in any file (CDN, fonts, analytics)."""
    text = _text(name)
    assert not _URL.findall(text), _URL.findall(text)
    assert "@import" not in text and "url(" not in text


def test_page_uses_only_its_own_files():
    html = _text("index.html")
    refs = re.findall(r"""(?:src|href)="([^"]*)\"""", html)
    assert refs, "the page links its script and style"
    for ref in refs:
        assert ref in ("/playground/app.js", "/playground/style.css", "#prompt", "data:,"), ref
    assert re.findall(r"<script[^>]*>", html) == ['<script type="module" src="/playground/app.js">']
    assert "<style" not in html and " style=" not in html
    assert not re.search(r"<[^>]+\son[a-z]+=", html), "no inline handlers (the CSP forbids them)"


_IMPORT = re.compile(r"""^import \{[^}]*\} from "\./([a-z]+\.js)";$""", re.M)


def _imports(name: str) -> list[str]:
    return _IMPORT.findall(_text(name))


@pytest.mark.parametrize("name", JS)
def test_modules_import_only_served_siblings(name):
    """Static imports by relative path of served files only (no bare names, URLs or dynamic import())."""
    text = _text(name)
    assert len(_imports(name)) == len(re.findall(r"^import\b", text, re.M)), "every import has the plain form"
    assert set(_imports(name)) <= set(JS) - {name}
    assert "import(" not in text and "require(" not in text


def test_every_module_is_reached_from_app_js():
    seen, todo = set(), ["app.js"]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += _imports(name)
    assert seen == set(JS)


def test_page_uses_the_public_api_only():
    """Over every JS file: only the three API paths, one fetch (in api(), which adds the key), the key
    in localStorage only, and model output set as text, never parsed as HTML."""
    texts = {name: _text(name) for name in JS}
    js = "\n".join(texts.values())
    called = re.findall(r"""(?<![\w.])api\("(/[^"]*)\"""", js)
    assert set(called) == {"/v1/models", "/v1/chat/completions", "/v1/schemas/check"}
    calls = len(re.findall(r"(?<![\w.])api\(", js)) - js.count("function api(")
    assert len(called) == calls, "every api() call names its path literally"
    assert [n for n, t in texts.items() if "fetch(" in t] == ["api.js"] and js.count("fetch(") == 1
    assert [n for n, t in texts.items() if "localStorage" in t] == ["api.js"]
    assert "sessionStorage" not in js and "document.cookie" not in js
    assert "innerHTML" not in js and "outerHTML" not in js and "insertAdjacentHTML" not in js
    assert "eval(" not in js and "new Function" not in js  # the CSP forbids them too


@pytest.mark.parametrize("name", JS)
def test_modules_stay_small(name):
    """The script was split so that no module grows past a readable size."""
    assert len(_text(name).splitlines()) <= 400
