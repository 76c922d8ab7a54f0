"""The benchmark stand-in folder (bench/standin.py): SmolLM2's vocabulary on a tiny seeded body."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import standin


@pytest.fixture(scope="module")
def built(hf_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return standin.ensure_standin(home=tmp_path_factory.mktemp("home"), source=hf_model_dir)


def test_folder_has_the_source_tokenizer_and_a_tiny_config(built: Path, hf_model_dir: Path) -> None:
    assert built.name == standin.STANDIN_NAME and built.parent.name == "models"
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (built / name).read_bytes() == (hf_model_dir / name).read_bytes()
    config, source = json.loads((built / "config.json").read_text()), json.loads((hf_model_dir / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["head_dim"]) == (64, 1, 32)
    for key in ("vocab_size", "bos_token_id", "eos_token_id", "rope_theta", "model_type", "architectures"):
        assert config[key] == source[key]
    assert config["tie_word_embeddings"] is False


def test_weights_have_every_llama_tensor_at_the_config_shapes(built: Path) -> None:
    from safetensors.torch import load_file

    config = json.loads((built / "config.json").read_text())
    state = load_file(str(built / "model.safetensors"))
    vocab, hidden = config["vocab_size"], config["hidden_size"]
    assert state["model.embed_tokens.weight"].shape == (vocab, hidden)
    assert state["lm_head.weight"].shape == (vocab, hidden)
    qkv = config["num_attention_heads"] * config["head_dim"]
    assert state["model.layers.0.self_attn.q_proj.weight"].shape == (qkv, hidden)
    assert state["model.layers.0.mlp.down_proj.weight"].shape == (hidden, config["intermediate_size"])
    assert not any(k.startswith("model.layers.1.") for k in state)


def test_head_favours_closing_tokens_and_shuns_blank_ones(built: Path) -> None:
    from safetensors.torch import load_file

    head = load_file(str(built / "model.safetensors"))["lm_head.weight"]
    closing, blank, quoted = standin.token_classes(built)
    assert closing and blank and quoted
    assert all(head[t, 0] > 0 for t in closing)
    assert all(head[t, 0] < 0 for t in blank)
    assert all(head[t, 1] < 0 for t in quoted)


def test_weights_are_the_same_every_time(built: Path, hf_model_dir: Path, tmp_path: Path) -> None:
    """Fixed seed: every machine benchmarks the same engine."""
    standin.write_standin(hf_model_dir, tmp_path)
    assert (tmp_path / "model.safetensors").read_bytes() == (built / "model.safetensors").read_bytes()


def test_an_existing_folder_is_reused(built: Path) -> None:
    before = (built / "model.safetensors").stat().st_mtime_ns
    assert standin.ensure_standin(home=built.parent.parent) == built
    assert (built / "model.safetensors").stat().st_mtime_ns == before


def test_compare_serves_the_standin_under_the_default_name_and_template() -> None:
    """``bench.compare --model standin``: gramserve (and the engine alone, same flags) serve the stand-in
    folder as SmolLM2 with the hermes template, so the workloads' bodies and vLLM's flags stay the same."""
    from bench.compare import MODEL_NAME, EngineFlags, vllm_cmd
    from server.config import settings_from_args

    folder = Path("/cache/models") / standin.STANDIN_NAME
    flags = EngineFlags(max_model_len=2048, kv_cache_gib=2, max_num_seqs=None, model=folder)
    settings = settings_from_args(flags.gramserve_args())
    assert (settings.model, settings.model_name, settings.chat_template) == (str(folder), MODEL_NAME, "hermes")
    assert settings_from_args(EngineFlags(max_model_len=2048, kv_cache_gib=2, max_num_seqs=None)
                              .gramserve_args()).model is None
    cmd = vllm_cmd(8000, flags, model=folder)
    assert cmd[cmd.index("--model") + 1] == str(folder) and cmd[cmd.index("--served-model-name") + 1] == MODEL_NAME
