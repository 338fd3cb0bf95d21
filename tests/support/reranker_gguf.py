"""A tiny BERT reranker as a GGUF, for the engine's rank-pooling path: llama.cpp's
`bert` layout with rank pooling and a classification head (`cls`, then `cls.output`
with one output), as llama.cpp's converter writes a cross-encoder (bge-reranker,
ms-marco MiniLM). Its weights are seeded random numbers and its WordPiece vocabulary
a few hundred pieces, so its scores mean nothing; but `reference_score` runs the same
network in numpy, so a test can check that the score llama.cpp returns is the head's.

`rerank_template` writes a second file with a `tokenizer.chat_template.rerank`
(Qwen3-Reranker's way of laying out a pair), for the templated layout.
"""

from __future__ import annotations

import hashlib
import math
import string
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from tests.support.npm import CACHE

WIDTH, HEADS, FFN, LAYERS, CONTEXT, TYPES = 32, 2, 64, 2, 512, 2
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD, UNK, CLS, SEP, MASK = range(len(SPECIALS))
WORDS = ("what", "is", "a", "the", "panda", "bear", "giant", "hi", "it", "china", "lives",
         "in", "where", "do", "pandas", "live", "bamboo", "eat", "revenue", "rose",
         "query", "document", "species", "endemic", "to")
RECIPE_VERSION = 1  # raise when the layout below changes
EPS = 1e-12


def vocabulary() -> list[str]:
    """llama.cpp's WordPiece form: a word start carries the phantom space "▁"."""
    letters = string.ascii_lowercase + string.digits
    pieces = [*SPECIALS, *("\u2581" + w for w in WORDS), *("\u2581" + c for c in letters),
              *letters, *("\u2581" + c for c in string.punctuation)]
    return list(dict.fromkeys(pieces))  # ("a" is a word and a letter)


def reranker_gguf(template: str | None = None) -> Path:
    """The model (with `template` as its rerank template, if given), made on first use."""
    recipe = repr((RECIPE_VERSION, WIDTH, HEADS, FFN, LAYERS, CONTEXT, template))
    key = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    target = CACHE / "reranker-tiny" / f"reranker-tiny-{key}.gguf"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        _write(partial, template)
        partial.replace(target)
    return target


@cache
def weights() -> dict[str, np.ndarray]:
    """Every tensor, under llama.cpp's names, in float32 (seeded)."""
    rng = np.random.default_rng(4343)
    vocab = len(vocabulary())

    def w(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    out = {"token_embd.weight": w(vocab, WIDTH),
           "token_types.weight": w(TYPES, WIDTH),
           "position_embd.weight": w(CONTEXT, WIDTH),
           "token_embd_norm.weight": 1 + w(WIDTH, scale=0.05),
           "token_embd_norm.bias": w(WIDTH, scale=0.05)}
    for i in range(LAYERS):
        p = f"blk.{i}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            out[f"{p}.{name}.weight"] = w(WIDTH, WIDTH)
            out[f"{p}.{name}.bias"] = w(WIDTH, scale=0.05)
        for name in ("attn_output_norm", "layer_output_norm"):
            out[f"{p}.{name}.weight"] = 1 + w(WIDTH, scale=0.05)
            out[f"{p}.{name}.bias"] = w(WIDTH, scale=0.05)
        out[f"{p}.ffn_up.weight"], out[f"{p}.ffn_up.bias"] = w(FFN, WIDTH), w(FFN, scale=0.05)
        out[f"{p}.ffn_down.weight"] = w(WIDTH, FFN)
        out[f"{p}.ffn_down.bias"] = w(WIDTH, scale=0.05)
    out["cls.weight"], out["cls.bias"] = w(WIDTH, WIDTH), w(WIDTH, scale=0.05)
    out["cls.output.weight"], out["cls.output.bias"] = w(1, WIDTH, scale=1.0), w(1)
    return out


def _write(path: Path, template: str | None) -> None:
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "bert")
    writer.add_name("reranker-tiny")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(WIDTH)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_layer_norm_eps(EPS)
    writer.add_block_count(LAYERS)
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.RANK)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    tokens = vocabulary()
    writer.add_token_list(tokens)
    writer.add_token_types([int(gguf.TokenType.UNKNOWN if i == UNK
                                else gguf.TokenType.CONTROL if i < len(SPECIALS)
                                else gguf.TokenType.NORMAL) for i in range(len(tokens))])
    writer.add_token_type_count(TYPES)
    writer.add_bos_token_id(CLS)
    writer.add_sep_token_id(SEP)
    writer.add_unk_token_id(UNK)
    writer.add_pad_token_id(PAD)
    writer.add_mask_token_id(MASK)
    if template is not None:
        writer.add_chat_template([{"name": "rerank", "template": template}])
    for name, array in weights().items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# -- the same network in numpy ---------------------------------------------------------


def _norm(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * w[f"{name}.weight"] + w[f"{name}.bias"]


def _linear(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]


def _gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def reference_score(token_ids: list[int]) -> float:
    """The pair's score: BERT over the tokens (segment 0 throughout, as llama.cpp's
    graph adds the first token type), the first token's state through `cls` (tanh),
    then `cls.output`."""
    w = {k: v.astype(np.float64) for k, v in weights().items()}
    n = len(token_ids)
    x = w["token_embd.weight"][token_ids] + w["position_embd.weight"][:n] \
        + w["token_types.weight"][0]
    x = _norm(x, w, "token_embd_norm")
    for i in range(LAYERS):
        p = f"blk.{i}"
        q, k, v = (_linear(x, w, f"{p}.{m}").reshape(n, HEADS, -1).transpose(1, 0, 2)
                   for m in ("attn_q", "attn_k", "attn_v"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = ((scores / scores.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2)
        x = _norm(x + _linear(context.reshape(n, -1), w, f"{p}.attn_output"), w,
                  f"{p}.attn_output_norm")
        hidden = _gelu(_linear(x, w, f"{p}.ffn_up"))
        x = _norm(x + _linear(hidden, w, f"{p}.ffn_down"), w, f"{p}.layer_output_norm")
    head = np.tanh(_linear(x[0], w, "cls"))
    return float(_linear(head, w, "cls.output")[0])
