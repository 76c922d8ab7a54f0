"""Fixtures for front-end unit tests: a ServerState + app around the scripted FakeEngine.

Built the way ``server.runner.build_state`` builds the real state, except that the engine
is :class:`server.engine.fake.FakeEngine` (one token per character). The grammar cache
uses the real SmolLM2 tokenizer (from the converted default model folder, or
``GRAMSERVE_MODEL_DIR``) so constraint compile checks run exactly as in production;
it is loaded once per session (a few seconds).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

__all__ = ["AppFactory", "Built"]


def _model_dir() -> Path:
    env = os.environ.get("GRAMSERVE_MODEL_DIR")
    if env:
        return Path(env)
    from server.default_model import ensure_default_model

    return ensure_default_model(progress=False)


@pytest.fixture(scope="session")
def hf_model_dir() -> Path:
    return _model_dir()


@pytest.fixture(scope="session")
def grammar_cache(hf_model_dir: Path) -> Iterator[Any]:
    """One grammar cache per session; its tokenizer info is built on first compile."""
    from server.structured.grammar_cache import GrammarCache, tokenizer_info_from_hf

    def info() -> Any:
        import transformers

        return tokenizer_info_from_hf(transformers.AutoTokenizer.from_pretrained(str(hf_model_dir)))

    cache = GrammarCache(info, max_entries=256, compile_timeout_s=30.0)
    yield cache
    cache.close()


@pytest.fixture(scope="session")
def hermes_renderer(hf_model_dir: Path) -> Any:
    from server.chat.render import ChatRenderer

    return ChatRenderer.from_model(model_dir_or_tokenizer=str(hf_model_dir), chat_template="hermes")


@dataclass
class Built:
    """What ``make_app`` returns: the app, its state and the fake engine inside."""

    app: Any
    state: Any
    engine: Any

    def client(self, **kwargs: Any) -> Any:
        from fastapi.testclient import TestClient

        return TestClient(self.app, raise_server_exceptions=False, **kwargs)

    def async_client(self) -> Any:
        import httpx

        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://test")


AppFactory = Callable[..., Built]


@pytest.fixture
def make_app(grammar_cache: Any, hermes_renderer: Any) -> AppFactory:
    """make_app(script=..., settings=Settings(...), delay=..., max_model_len=..., tool_parser="hermes",
    reasoning_parser=None)."""
    from server import metrics
    from server.api.app import create_app
    from server.config import Settings
    from server.engine.fake import FakeEngine
    from server.state import ServerState
    from tool_parsers import resolve_parsers

    def build(*, script: Callable[..., list[str]] | None = None, settings: Settings | None = None,
              tool_parser: str | None = "hermes", reasoning_parser: str | None = None, with_cache: bool = True,
              **engine_kwargs: Any) -> Built:
        engine = FakeEngine(**engine_kwargs) if script is None else FakeEngine(script=script, **engine_kwargs)
        parsers = resolve_parsers(tool_parser, reasoning_parser, template_name="hermes", template_source="")
        state = ServerState(
            settings=settings or Settings(),
            engine=engine,
            renderer=hermes_renderer,
            grammar_cache=grammar_cache if with_cache else None,
            tool_parser=parsers.tool_parser,  # resolved as the server resolves them (runner.build_state)
            reasoning_parser=parsers.reasoning,
        )
        metrics.init_labels(tool_parser=tool_parser)
        state.ready = True
        return Built(app=create_app(state), state=state, engine=engine)

    return build
