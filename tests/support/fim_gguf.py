"""A tiny llama-architecture GGUF with a real fill-in-the-middle vocabulary, for the
engine's FIM path (`/infill`, `/v1/fim/completions`).

Its vocabulary is GPT-2's byte-level alphabet (one token per byte, one merge) plus
Qwen2.5-Coder's special tokens (`<|fim_prefix|>` … `<|file_sep|>`), declared by id in
the GGUF's `tokenizer.ggml.fim_*_token_id` keys as llama.cpp's converter writes them;
its weights are small seeded random numbers (one layer, 32 wide). What it generates is
noise, but it is a model llama.cpp loads and runs, and its prompts are laid out by
its own FIM tokens: tests check the layout, the shapes and the refusals, never words.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from tests.support.npm import CACHE

SPECIALS = ("<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
            "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")
EMBED, FF, HEADS, CONTEXT = 32, 64, 2, 1024


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in for each byte (its `bytes_to_unicode`), in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    shifted, extra = {}, 0
    for b in range(256):
        if b in printable:
            shifted[b] = chr(b)
        else:
            shifted[b] = chr(256 + extra)
            extra += 1
    return [shifted[b] for b in range(256)]


MERGED = "ĠĠ"  # two spaces: llama.cpp wants at least one merge, and its token


def special_id(text: str) -> int:
    return 257 + SPECIALS.index(text)


@cache
def fim_gguf() -> Path:
    """The model, written once per cache."""
    target = CACHE / "fim-tiny" / "fim-tiny.gguf"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        _write(partial, fim=True)
        partial.replace(target)
    return target


@cache
def plain_gguf() -> Path:
    """The same model without FIM token ids or FIM token texts."""
    target = CACHE / "fim-tiny" / "no-fim-tiny.gguf"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        _write(partial, fim=False)
        partial.replace(target)
    return target


def _write(path: Path, *, fim: bool) -> None:
    gguf = pytest.importorskip("gguf")
    specials = SPECIALS if fim else ("<|endoftext|>",)
    tokens = [*byte_alphabet(), MERGED, *specials]
    types = [1] * 257 + [3] * len(specials)  # normal, control
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("fim-tiny" if fim else "no-fim-tiny")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(EMBED)
    writer.add_feed_forward_length(FF)
    writer.add_block_count(1)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(EMBED // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(["Ġ Ġ"])
    writer.add_bos_token_id(257)
    writer.add_eos_token_id(257)
    writer.add_add_bos_token(False)
    if fim:
        writer.add_uint32("tokenizer.ggml.fim_pre_token_id", special_id("<|fim_prefix|>"))
        writer.add_uint32("tokenizer.ggml.fim_suf_token_id", special_id("<|fim_suffix|>"))
        writer.add_uint32("tokenizer.ggml.fim_mid_token_id", special_id("<|fim_middle|>"))
        writer.add_uint32("tokenizer.ggml.fim_pad_token_id", special_id("<|fim_pad|>"))
        writer.add_uint32("tokenizer.ggml.fim_rep_token_id", special_id("<|repo_name|>"))
        writer.add_uint32("tokenizer.ggml.fim_sep_token_id", special_id("<|file_sep|>"))
    rng = np.random.default_rng(43)
    vocab = len(tokens)

    def weights(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    writer.add_tensor("token_embd.weight", weights(vocab, EMBED))
    writer.add_tensor("output_norm.weight", np.ones(EMBED, dtype=np.float32))
    writer.add_tensor("output.weight", weights(vocab, EMBED))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(EMBED, dtype=np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        writer.add_tensor(f"blk.0.{name}.weight", weights(EMBED, EMBED))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(EMBED, dtype=np.float32))
    writer.add_tensor("blk.0.ffn_gate.weight", weights(FF, EMBED))
    writer.add_tensor("blk.0.ffn_up.weight", weights(FF, EMBED))
    writer.add_tensor("blk.0.ffn_down.weight", weights(EMBED, FF))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
