"""server/config.py: one declaration per option; flags win over GRAMSERVE_* environment values."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from server.config import Settings, build_parser, env_name, settings_from_args


def test_every_setting_has_a_flag_and_help() -> None:
    flags = {a.dest: a for a in build_parser()._actions if a.option_strings}
    for f in dataclasses.fields(Settings):
        if f.name == "engine_args":  # vLLM's own flags, not declared here (test_vllm_serve_lines_carry_over)
            continue
        assert f.name in flags, f.name
        assert flags[f.name].help
    assert settings_from_args([]) == Settings(), "no flags, no environment: the declared defaults"
    # every help renders (argparse reads a help as a %-format: a bare "30%" in one broke `--help`)
    assert "--stream-interval" in build_parser().format_help()


@pytest.mark.parametrize("flag,env_value,cli_value,field,from_env,from_cli", [
    ("--max-model-len", "1234", "99", "max_model_len", 1234, 99),
    ("--drain-timeout", "2.5", "7", "drain_timeout", 2.5, 7.0),
    ("--tool-call-parser", "mistral", "hermes", "tool_call_parser", "mistral", "hermes"),
    ("--api-key", "k1,k2", "k3", "api_keys", ("k1", "k2"), ("k3",)),
])
def test_flag_wins_over_environment(monkeypatch: pytest.MonkeyPatch, flag: str, env_value: str, cli_value: str,
                                    field: str, from_env: object, from_cli: object) -> None:
    monkeypatch.setenv(env_name(flag), env_value)
    assert getattr(settings_from_args([]), field) == from_env
    assert getattr(settings_from_args([flag, cli_value]), field) == from_cli


@pytest.mark.parametrize("raw,expected", [("1", True), ("true", True), ("0", False), ("no", False)])
def test_switches_from_environment(monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool) -> None:
    monkeypatch.setenv("GRAMSERVE_LOG_PROMPTS", raw)
    monkeypatch.setenv("GRAMSERVE_NO_TOOL_CONSTRAINTS", raw)
    s = settings_from_args([])
    assert s.log_prompts is expected and s.tool_constraints is (not expected)


def test_special_forms(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("k2\n\nk3\n")
    s = settings_from_args(["--api-key", "k1", "--api-key-file", str(keys), "-tp", "2", "--tool-call-parser", "none",
                            "--cors-origin", "https://a", "--cors-origin", "https://b", "--kv-cache-space", "3"])
    assert s.api_keys == ("k1", "k2", "k3") and s.tensor_parallel_size == 2 and s.tool_call_parser is None
    assert s.cors_origins == ("https://a", "https://b") and s.kv_cache_space_gib == 3.0
    with pytest.raises(SystemExit):
        settings_from_args(["--reasoning-field", "nowhere"])


def test_stream_interval_is_at_least_one(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert settings_from_args([]).stream_interval == 1
    monkeypatch.setenv("GRAMSERVE_STREAM_INTERVAL", "4")
    assert settings_from_args([]).stream_interval == 4
    with pytest.raises(SystemExit):
        settings_from_args(["--stream-interval", "0"])
    assert "--stream-interval: must be 1 or more, not 0" in capsys.readouterr().err


#: ``vllm serve`` command lines as vLLM's recipes write them (Qwen3, DeepSeek, gpt-oss, Llama 4), with
#: the engine flags the issue names; each must parse with ``gramserve serve`` in its place.
RECIPES = {
    "qwen3": "Qwen/Qwen3-8B --enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3 "
             "--enable-prefix-caching --max-num-batched-tokens 8192",
    "deepseek": "deepseek-ai/DeepSeek-V3.1 --tensor-parallel-size 8 --enable-expert-parallel --served-model-name ds "
                "--enable-auto-tool-choice --tool-call-parser deepseek_v31 --kv-cache-dtype fp8 --trust-remote-code",
    "gpt-oss": "openai/gpt-oss-120b --async-scheduling --tool-call-parser openai --enable-auto-tool-choice "
               "--reasoning-parser gpt_oss --gpu-memory-utilization 0.95",
    "llama4": "meta-llama/Llama-4-Scout-17B-16E-Instruct -tp 8 --max-model-len 1000000 --quantization fp8 "
              "--kv-cache-dtype fp8 --enable-auto-tool-choice --tool-call-parser llama4_pythonic "
              "--speculative-config {\"method\":\"ngram\",\"num_speculative_tokens\":3,\"prompt_lookup_max\":4} "
              "--enable-lora --max-loras 2",
}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_vllm_serve_lines_carry_over(name: str) -> None:
    """The model as the first argument; gramserve's flags to Settings; every other flag through vLLM's own
    parser to its AsyncEngineArgs, which the engine is built from (server/engine/vllm_engine.engine_config)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    from server.engine.vllm_engine import engine_args
    from server.runner import engine_options

    settings = settings_from_args(RECIPES[name].split())
    assert settings.model == RECIPES[name].split()[0]
    assert settings.enable_auto_tool_choice or "--enable-auto-tool-choice" not in RECIPES[name]
    args = engine_args(engine_options(settings))
    assert isinstance(args, AsyncEngineArgs) and args.model == settings.model
    given = dict(settings.engine_args)
    for field, value in given.items():
        assert getattr(args, field) == value, field
    expected = {"qwen3": {"enable_prefix_caching": True},
                "deepseek": {"enable_expert_parallel": True, "kv_cache_dtype": "fp8"},
                "gpt-oss": {"async_scheduling": True},
                "llama4": {"quantization": "fp8", "kv_cache_dtype": "fp8", "enable_lora": True, "max_loras": 2,
                           "speculative_config": {"method": "ngram", "num_speculative_tokens": 3,
                                                  "prompt_lookup_max": 4}}}[name]
    assert {k: given[k] for k in expected} == expected


def test_a_flag_neither_knows_is_an_error() -> None:
    with pytest.raises(SystemExit, match="--no-such-flag"):
        settings_from_args(["--no-such-flag", "1"])


def test_an_engine_flag_value_is_never_taken_for_the_model() -> None:
    s = settings_from_args(["--kv-cache-dtype", "fp8", "--port", "9000"])
    assert s.model is None and s.port == 9000 and dict(s.engine_args) == {"kv_cache_dtype": "fp8"}


def test_help_lists_every_registered_family() -> None:
    """The family lists in --help come from the registries: a new family needs no edit here."""
    from reasoning_parsers import REASONING_PARSERS
    from tool_parsers import TOOL_PARSERS

    helps = {a.dest: a.help or "" for a in build_parser()._actions}
    assert all(name in helps["tool_call_parser"] for name in TOOL_PARSERS)
    assert all(name in helps["reasoning_parser"] for name in REASONING_PARSERS)


def test_readme_flags_table_names_every_flag() -> None:
    """README's flag table is checked against the one declaration (Settings)."""
    import re

    from server.config import _flag, _option_fields

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text.split("\n## Flags\n", 1)[1].split("\n## ", 1)[0]
    rows = "\n".join(line for line in section.splitlines() if line.startswith("| `--"))
    named = set(re.findall(r"`(--[a-z0-9-]+)", rows))
    assert {_flag(f) for f in _option_fields()} == named
