"""server/config.py: one declaration per option; flags win over GRAMSERVE_* environment values."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from server.config import Settings, build_parser, env_name, settings_from_args


def test_every_setting_has_a_flag_and_help() -> None:
    flags = {a.dest: a for a in build_parser()._actions if a.option_strings}
    for f in dataclasses.fields(Settings):
        assert f.name in flags, f.name
        assert flags[f.name].help
    assert settings_from_args([]) == Settings(), "no flags, no environment: the declared defaults"


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
