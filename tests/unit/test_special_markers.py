"""A family whose tool-call markers are special tokens keeps them in the output for its parser.

Checked with real tokenizers available offline: Mistral's tekken (v3+, shipped inside the
``mistral_common`` package, loaded through vLLM's own ``MistralTokenizer`` as vLLM serves
Mistral models), where ``[TOOL_CALLS]`` is a control token that skipping special tokens drops,
and SmolLM2's, where ``<tool_call>`` is plain text.
"""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest

from server.chat.prompt_tokens import markers_are_special
from tool_parsers import get_tool_parser


def _tekken_dir(tmp_path: Path) -> Path:
    spec = importlib.util.find_spec("mistral_common")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("mistral_common (a vLLM dependency) is not installed")
    src = Path(list(spec.submodule_search_locations)[0]) / "data" / "tekken_240911.json"
    shutil.copy(src, tmp_path / "tekken.json")
    return tmp_path


def _markers(name: str) -> tuple[str, ...]:
    p = get_tool_parser(name)
    return (p.start, p.end, p.format.trigger)


def test_mistral_control_marker_is_kept(tmp_path: Path) -> None:
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
    from vllm.tokenizers.mistral import MistralTokenizer

    tok = MistralTokenizer.from_pretrained(str(_tekken_dir(tmp_path)))
    assert markers_are_special(tok, _markers("mistral_v11"))
    inner = tok.tokenizer
    ids = [inner.get_control_token("[TOOL_CALLS]")] + inner.encode('get_weather{"city": "Paris"}', bos=False, eos=False)
    dropped = inner.decode(ids, special_token_policy=SpecialTokenPolicy.IGNORE)
    kept = inner.decode(ids, special_token_policy=SpecialTokenPolicy.KEEP)
    parser = get_tool_parser("mistral_v11")
    assert parser.parse(dropped, final=True).tool_calls == ()  # what skipping would leave the parser
    assert [c.name for c in parser.parse(kept, final=True).tool_calls] == ["get_weather"]


def test_hermes_markers_are_text_for_smollm2(hf_model_dir: Path) -> None:
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(hf_model_dir))
    assert not markers_are_special(tok, _markers("hermes"))


def test_requests_keep_special_tokens_only_when_needed(make_app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    built = make_app()
    tools = [{"type": "function", "function": {"name": "f"}}]
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 5}
    built.client().post("/v1/chat/completions", json={**body, "tools": tools})
    assert built.engine.requests[-1].sampling.skip_special_tokens is True  # the fake tokenizer has none
    monkeypatch.setattr("server.plan.build.markers_are_special", lambda tok, markers: True)
    built.client().post("/v1/chat/completions", json={**body, "tools": tools})
    assert built.engine.requests[-1].sampling.skip_special_tokens is False
    built.client().post("/v1/chat/completions", json=body)  # no tools: nothing to parse
    assert built.engine.requests[-1].sampling.skip_special_tokens is True
