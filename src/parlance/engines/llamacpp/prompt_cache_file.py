"""The prompt cache's file format: one saved sequence per file, valid for one cache key.

    magic | key digest (32) | n_tokens (u32) | state size (u64) | tokens (i32 each)
    | state | sha256 of everything before (32)

`key_digest` is what an entry is valid for (the model file, the context layout, KV
type, RoPE settings and llama.cpp's version). A file whose size disagrees with its
header, whose key is not ours, or whose checksum fails is `Unusable`. A new layout
bumps `MAGIC`: the old files are then unusable, and the disk tier removes them.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterator, Mapping
from typing import BinaryIO

from parlance.engines.llamacpp.prompt_cache_entry import Entry

MAGIC = b"PRLNCKV1"
HEADER = struct.Struct("<8s32sIQ")
DIGEST = 32
SUFFIX = ".kv"
WRITE_PIECE = 8 << 20  # bytes of state per piece `encoded` yields (written and checksummed)


def key_digest(facts: Mapping[str, object]) -> bytes:
    """What an entry is valid for, as a digest: a file made under other facts is foreign."""
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).digest()


def encoded(entry: Entry, key: bytes) -> Iterator[bytes | memoryview]:
    """An entry's file, in pieces of at most `WRITE_PIECE` bytes of state."""
    tokens = struct.pack(f"<{len(entry.tokens)}i", *entry.tokens)
    digest = hashlib.sha256()
    state = memoryview(entry.state)
    pieces: list[bytes | memoryview] = [
        HEADER.pack(MAGIC, key, len(entry.tokens), len(entry.state)) + tokens]
    pieces += (state[i:i + WRITE_PIECE] for i in range(0, len(state), WRITE_PIECE))
    for piece in pieces:
        digest.update(piece)
        yield piece
    yield digest.digest()


def encode(entry: Entry, key: bytes) -> bytes:
    return b"".join(encoded(entry, key))


def file_size(entry: Entry) -> int:
    return HEADER.size + 4 * len(entry.tokens) + len(entry.state) + DIGEST


class Unusable(ValueError):
    """A cache file that is truncated, corrupt or made for another key."""


def read_tokens(data: bytes, key: bytes, file_size: int) -> tuple[int, ...]:
    """The tokens from the start of a file (`data` holds at least its header and tokens),
    checked against its header and size; the state is not read."""
    if len(data) < HEADER.size:
        raise Unusable("shorter than its header")
    magic, digest, n_tokens, state_size = HEADER.unpack_from(data)
    if magic != MAGIC or digest != key:
        raise Unusable("another format or key")
    end = HEADER.size + 4 * n_tokens
    if file_size != end + state_size + DIGEST or len(data) < end:
        raise Unusable("its size disagrees with its header")
    return struct.unpack_from(f"<{n_tokens}i", data, HEADER.size)


def decode(data: bytes, key: bytes) -> Entry:
    tokens = read_tokens(data, key, len(data))
    body, digest = data[:-DIGEST], data[-DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        raise Unusable("checksum mismatch")
    return Entry(tokens, body[HEADER.size + 4 * len(tokens):])


def read_head(fh: BinaryIO) -> bytes:
    """A file's header and tokens (what `read_tokens` checks), without its state."""
    head = fh.read(HEADER.size)
    if len(head) == HEADER.size:
        head += fh.read(4 * HEADER.unpack_from(head)[2])
    return head


def file_name(tokens: tuple[int, ...]) -> str:
    """The name of the file that holds these tokens (one file per prefix)."""
    name = hashlib.sha256(struct.pack(f"<{len(tokens)}i", *tokens))
    return f"{name.hexdigest()[:32]}{SUFFIX}"
