"""How much memory llama.cpp will allocate for a model, from its GGUF header alone.

A load's memory is decided by its options: the KV cache holds, for every cell, one key
and one value row per layer (f16: 2 bytes an element; where llama-cpp-python lacks
Parlance's attention patch, the batch-invariant layout's q8_0 keys take 1.0625, and the
estimate errs high), and there are
`pad(context, 256)` cells per slot (one set in all with a unified cache); the compute
buffer holds one eval batch of logits. llama.cpp allocates and clears all of it when the
context is made, so an absurd `context_length` is an OOM kill, not a slow start. These
figures are checked against SmolLM2's own load log (tests/models/test_memory_estimate.py).
Sliding-window and MLA caches are smaller than this estimate says: it errs high.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parlance.models.gguf import GgufHeader, read_gguf_header

__all__ = ["MemoryEstimate", "ModelShape", "available_memory", "estimate", "kv_cells",
           "model_shape", "shape_from_header"]

KV_CELL_PAD = 256  # llama.cpp rounds each sequence's context up to this many cells
KV_ELEMENT_BYTES = 2  # f16
F32_BYTES = 4


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What sizes a model's buffers; None where the header does not say."""

    weights_bytes: int  # the file size: weights are mapped whole
    trained_context: int | None  # `<arch>.context_length`, llama.cpp's n_ctx_train
    kv_cell_bytes: int | None  # one KV cell across every layer, keys and values
    n_vocab: int | None
    n_embd: int | None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _per_layer(value: Any, n_layer: int) -> list[int] | None:
    """A hyperparameter given once for all layers or as one value per layer."""
    if _int(value) is not None:
        return [value] * n_layer
    if isinstance(value, list) and len(value) == n_layer and all(_int(v) is not None
                                                                  for v in value):
        return list(value)
    return None


def _kv_cell_bytes(meta: dict[str, Any], arch: str) -> int | None:
    """Sum over layers of (n_embd_k_gqa + n_embd_v_gqa) elements, as llama.cpp sizes them."""
    n_layer = _int(meta.get(f"{arch}.block_count"))
    n_embd = _int(meta.get(f"{arch}.embedding_length"))
    if not n_layer or not n_embd:
        return None
    heads = _per_layer(meta.get(f"{arch}.attention.head_count"), n_layer)
    if not heads or not heads[0]:
        return None  # no attention (a recurrent model): its state is not a KV cache
    heads_kv = _per_layer(meta.get(f"{arch}.attention.head_count_kv", heads), n_layer)
    if heads_kv is None:
        return None
    head_k = _int(meta.get(f"{arch}.attention.key_length")) or n_embd // heads[0]
    head_v = _int(meta.get(f"{arch}.attention.value_length")) or n_embd // heads[0]
    return sum(n * (head_k + head_v) for n in heads_kv) * KV_ELEMENT_BYTES


def shape_from_header(header: GgufHeader) -> ModelShape:
    meta = header.metadata
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        return ModelShape(header.size, None, None, None, None)
    n_vocab = (_int(meta.get(f"{arch}.vocab_size"))
               or header.array_lengths.get("tokenizer.ggml.tokens"))
    return ModelShape(
        weights_bytes=header.size,
        trained_context=_int(meta.get(f"{arch}.context_length")) or None,
        kv_cell_bytes=_kv_cell_bytes(meta, arch),
        n_vocab=n_vocab or None,
        n_embd=_int(meta.get(f"{arch}.embedding_length")) or None,
    )


@functools.lru_cache(maxsize=64)
def _shape(path: Path, mtime_ns: int, size: int) -> ModelShape:
    try:
        return shape_from_header(read_gguf_header(path))
    except (OSError, ValueError):  # not GGUF: only its size is known
        return ModelShape(size, None, None, None, None)


def model_shape(path: Path | None) -> ModelShape:
    """The shape of the model file at `path` (cached until the file changes); a file
    that cannot be read at all has an unknown shape and no size."""
    if path is None:
        return ModelShape(0, None, None, None, None)
    try:
        stat = path.stat()
    except OSError:
        return ModelShape(0, None, None, None, None)
    return _shape(path, stat.st_mtime_ns, stat.st_size)


def kv_cells(context_length: int, parallel: int, unified: bool) -> int:
    """KV cells llama.cpp allocates: each slot's context padded, once per slot."""
    per_slot = -(-context_length // KV_CELL_PAD) * KV_CELL_PAD
    return per_slot if unified else per_slot * parallel


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    weights: int
    kv: int
    compute: int  # the compute buffer and the logits output buffer
    draft: MemoryEstimate | None = None  # its draft model's, in a context like its own

    @property
    def total(self) -> int:
        return (self.weights + self.kv + self.compute
                + (self.draft.total if self.draft is not None else 0))


def estimate(shape: ModelShape, *, context_length: int, parallel: int, eval_batch_size: int,
             unified: bool) -> MemoryEstimate:
    cells = kv_cells(context_length, parallel, unified)
    kv = cells * (shape.kv_cell_bytes or 0)
    compute = 0
    if shape.n_vocab:
        # The graph's largest tensors are one micro-batch of logits (n_vocab wide) and two
        # hidden-state rows per token; llama.cpp batches no more tokens than the context
        # it was asked for (before padding).
        ubatch = min(eval_batch_size, context_length * (1 if unified else parallel))
        compute = ubatch * F32_BYTES * (shape.n_vocab + 2 * (shape.n_embd or 0))
        compute += parallel * shape.n_vocab * F32_BYTES  # one logits row per sequence
    return MemoryEstimate(shape.weights_bytes, kv, compute)


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """The kernel's estimate of memory a new allocation can get (MemAvailable), in
    bytes; None where there is no such file (not Linux)."""
    try:
        text = meminfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            fields = line.split()
            return int(fields[1]) * 1024 if len(fields) >= 2 and fields[1].isdigit() else None
    return None
