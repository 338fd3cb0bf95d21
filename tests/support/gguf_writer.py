"""A tiny GGUF writer: metadata as (type id, value) pairs, so every value type can be
exercised, and tensors as (name, dims, data bytes)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?",
        U64: "Q", I64: "q", F64: "d"}  # fmt: skip


def gguf_string(text: str) -> bytes:
    """A GGUF string: its length (u64), then its UTF-8 bytes."""
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _value(vtype: int, value: Any) -> bytes:
    if vtype == STR:
        return gguf_string(value)
    if vtype == ARR:
        etype, items = value
        return struct.pack("<IQ", etype, len(items)) + b"".join(_value(etype, v) for v in items)
    return struct.pack("<" + _FMT[vtype], value)


def write_gguf(
    path: Path,
    kv: dict[str, tuple[int, Any]],
    tensors: list[tuple[str, tuple[int, ...], int]] = (),  # type: ignore[assignment]
    *,
    version: int = 3,
    alignment: int = 32,
    magic: bytes = b"GGUF",
) -> int:
    """Write a GGUF file; `tensors` are (name, dims, data bytes). Returns the data offset."""
    out = bytearray(magic + struct.pack("<IQQ", version, len(tensors), len(kv)))
    for key, (vtype, value) in kv.items():
        out += gguf_string(key) + struct.pack("<I", vtype) + _value(vtype, value)
    offset = 0
    for name, dims, nbytes in tensors:
        out += gguf_string(name) + struct.pack(f"<I{len(dims)}Q", len(dims), *dims)
        out += struct.pack("<IQ", 2, offset)  # GGML_TYPE_Q4_0; offset within the data section
        offset += nbytes
    out += b"\0" * (-len(out) % alignment)
    data_offset = len(out)
    out += b"\x5a" * offset
    path.write_bytes(bytes(out))
    return data_offset


# A small model's header: what the listings and the memory estimate read.
BASE_KV: dict[str, tuple[int, Any]] = {
    "general.architecture": (STR, "llama"),
    "general.name": (STR, "Tiny Test"),
    "general.organization": (STR, "Acme"),
    "general.file_type": (U32, 15),
    "llama.context_length": (U32, 4096),
    "tokenizer.ggml.tokens": (ARR, (STR, [f"tok{i}" for i in range(1000)])),
    "tokenizer.ggml.scores": (ARR, (F32, [0.5] * 1000)),
    "tokenizer.chat_template": (STR, "{% for m in messages %}{{ m.content }}{% endfor %}"),
}
TENSORS = [("token_embd.weight", (8, 4), 18), ("output_norm.weight", (8,), 4 * 8)]  # 40 params
