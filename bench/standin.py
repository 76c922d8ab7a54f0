"""A GPU-speed stand-in engine for CPU benchmarks: vLLM itself on a tiny random-weight Llama.

SmolLM2 makes a few hundred tokens per second on this CPU, so the engine, not the front end, is
the ceiling and a front end's capacity cannot be read. The stand-in is a 1-layer, hidden-64
Llama with SmolLM2's tokenizer, vocabulary and chat template: every target (gramserve, vLLM's
own server, the engine alone) runs the same real vLLM engine, grammar and all, at thousands of
tokens per second, so the front end's CPU per token and its peak tok/s show as they would on
a GPU.

The weights are random (fixed seed) with two twists, so that grammar-constrained answers end
under greedy decoding: hidden dimension 0 is a constant carried from the embedding, which the
output head reads as a bias toward the tokens that close JSON (``"``, ``}``, ``]``, ``,``,
``</tool_call>``, the end token) and against whitespace-only tokens; dimension 1 marks tokens
holding a quote, and the head reads it as "no quote next". So a string gets one token and its
closing quote, numbers and objects close at once, and every answer is valid JSON or a valid tool
call that ends by itself; free text alternates quotes and random tokens (``plain`` runs with
``ignore_eos`` anyway). The answers mean nothing: read CPU and latency, never quality.

The folder is ``<gramserve home>/models/standin-<version>/`` (config, SmolLM2's tokenizer files
copied, weights written on first use); :func:`ensure_standin` builds it once.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["STANDIN_NAME", "STANDIN_VERSION", "SEED", "CLOSING_TEXTS", "standin_config", "token_classes", "standin_weights",
           "write_standin", "ensure_standin"]

STANDIN_VERSION = "3"
STANDIN_NAME = f"standin-{STANDIN_VERSION}"
SEED = 1234
HIDDEN, LAYERS, HEADS, HEAD_DIM, INTERMEDIATE = 64, 1, 2, 32, 128  # head_dim 32: vLLM's CPU attention minimum
# logit added to the tokens of these texts (random logits spread ~2.5, their top of 49k ~10): quotes
# and the ends of calls first, then closing brackets, then commas (an object ends rather than grows);
# the end token below the quote, so free text runs on and ends now and then
CLOSING_TEXTS = {'"': 13.0, '",': 12.5, '"}': 12.5, "</tool_call>": 13.0, "<|im_end|>": 10.0,
                 "}": 11.5, "]": 11.5, "}}": 11.5, ",": 10.5}
WHITESPACE_BIAS = -20.0  # whitespace-only tokens: a grammar that allows them would otherwise loop on them
AFTER_QUOTE_BIAS = -16.0  # a quote right after a token holding one: strings get one token, not none
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def standin_config(source: dict[str, Any]) -> dict[str, Any]:
    """The stand-in's config.json: SmolLM2's (vocabulary, special ids, RoPE) with a tiny body."""
    config = dict(source)
    config.update(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, num_key_value_heads=HEADS, head_dim=HEAD_DIM,
                  tie_word_embeddings=False, torch_dtype="float32")
    return config


def token_classes(folder: Path, closing_texts: dict[str, float] | None = None
                  ) -> tuple[dict[int, float], list[int], list[int]]:
    """(closing token id -> bias, whitespace-only ids, ids whose text holds a quote) of the tokenizer;
    ``closing_texts`` (text -> bias) defaults to :data:`CLOSING_TEXTS` (SmolLM2's hermes format)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    closing = {}
    for text, bias in (CLOSING_TEXTS if closing_texts is None else closing_texts).items():
        encoded = tok.encode(text, add_special_tokens=False).ids
        if len(encoded) == 1:  # a text that is not one token is never one sampling step
            closing[encoded[0]] = bias
    texts = [tok.decode([i], skip_special_tokens=False) for i in range(tok.get_vocab_size())]
    blank = [i for i, t in enumerate(texts) if t and not t.strip()]
    quoted = [i for i, t in enumerate(texts) if '"' in t]
    return closing, blank, quoted


def standin_weights(config: dict[str, Any], classes: tuple[dict[int, float], list[int], list[int]]) -> dict[str, Any]:
    """Random weights (seeded); dimension 0 a constant, dimension 1 "this token holds a quote", which
    the head turns into the biases above (a closing text's bias wins over the whitespace one)."""
    import torch

    gen = torch.Generator().manual_seed(SEED)
    vocab, hidden, inter = config["vocab_size"], HIDDEN, INTERMEDIATE
    qkv = HEADS * HEAD_DIM

    def rand(*shape: int, std: float) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * std

    closing, blank, quoted = classes
    embed = rand(vocab, hidden, std=0.1)
    embed[:, 0] = 1.0  # RMS-normed, dimension 0 is then ~6 whatever the token
    embed[:, 1] = 0.0
    embed[quoted, 1] = 1.0
    head = rand(vocab, hidden, std=0.5)
    head[:, :2] = 0.0
    norm0 = 6.0  # dimension 0 after the RMS norm
    head[blank, 0] = WHITESPACE_BIAS / norm0
    for token, bias in closing.items():
        head[token, 0] = bias / norm0
    head[quoted, 1] = AFTER_QUOTE_BIAS / norm0
    layer = "model.layers.0."
    state = {
        "model.embed_tokens.weight": embed,
        "model.norm.weight": torch.ones(hidden),
        "lm_head.weight": head,
        layer + "input_layernorm.weight": torch.ones(hidden),
        layer + "post_attention_layernorm.weight": torch.ones(hidden),
        layer + "self_attn.q_proj.weight": rand(qkv, hidden, std=0.05),
        layer + "self_attn.k_proj.weight": rand(qkv, hidden, std=0.05),
        layer + "self_attn.v_proj.weight": rand(qkv, hidden, std=0.05),
        layer + "self_attn.o_proj.weight": rand(hidden, qkv, std=0.05),
        layer + "mlp.gate_proj.weight": rand(inter, hidden, std=0.05),
        layer + "mlp.up_proj.weight": rand(inter, hidden, std=0.05),
        layer + "mlp.down_proj.weight": rand(hidden, inter, std=0.05),
    }
    return {k: v.contiguous() for k, v in state.items()}


def write_standin(source: Path, out_dir: Path) -> None:
    """Write the stand-in folder into ``out_dir`` (existing, empty) from SmolLM2's folder ``source``."""
    from safetensors.torch import save_file

    for name in _TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, out_dir / name)
    config = standin_config(json.loads((source / "config.json").read_text()))
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(standin_weights(config, token_classes(out_dir)), str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    for file in out_dir.iterdir():
        os.chmod(file, 0o644)  # the cache may be shared


def ensure_standin(*, home: Path | None = None, source: Path | None = None) -> Path:
    """The stand-in folder, built on first use (in a temp folder, then renamed into place, so
    several processes may call this at once)."""
    from server.default_model import ensure_default_model, gramserve_home

    root = (Path(home) if home is not None else gramserve_home()) / "models"
    dest = root / STANDIN_NAME
    if (dest / "model.safetensors").is_file():
        return dest
    src = Path(source) if source is not None else Path(ensure_default_model(progress=False))
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{STANDIN_NAME}.tmp-", dir=root))
    os.chmod(staging, 0o755)
    try:
        write_standin(src, staging)
        try:
            os.replace(staging, dest)
        except OSError:  # another process put it there first
            if not (dest / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


if __name__ == "__main__":
    print(ensure_standin())
