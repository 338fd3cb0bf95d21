"""Model files' GGUF headers, read once per version of the file.

Model listings describe every model on each request (clients poll them), so a header
is read again only when its file's path, modification time or size changed. Reading
blocks (a header is milliseconds to a few tens of them): call from a worker thread
where a request waits.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from parlance.models.discovery import model_parts
from parlance.models.gguf import GgufHeader, GgufInfo, describe, header_digest, read_gguf_header
from parlance.models.registry import ModelSpec

__all__ = ["ModelFile", "file_size", "header_of", "whole_header"]


@dataclass(frozen=True, slots=True)
class ModelFile:
    """A model file as its header describes it."""

    header: GgufHeader
    info: GgufInfo
    digest: str  # of the header and tensor table (`gguf.header_digest`)
    modified_ns: int
    size: int  # every shard's bytes


@functools.lru_cache(maxsize=256)
def _read(path: Path, mtime_ns: int, size: int) -> ModelFile | None:
    try:
        header = read_gguf_header(path)
        total = sum(part.stat().st_size for part in model_parts(path))
        return ModelFile(header, describe(header), header_digest(path, header), mtime_ns,
                         total)
    except (OSError, ValueError):
        return None


def header_of(spec: ModelSpec) -> ModelFile | None:
    """The model's file as its header describes it; None: it has no file here (an
    upstream server's model) or the file is no readable GGUF."""
    try:
        path = spec.locate()
        stat = path.stat()
    except (OSError, ValueError):
        return None
    return _read(path, stat.st_mtime_ns, stat.st_size)


def whole_header(spec: ModelSpec) -> GgufHeader | None:
    """The header with every array kept (a vocabulary too: tens of thousands of
    strings), read afresh: too big to keep for each model."""
    try:
        return read_gguf_header(spec.locate(), whole_arrays=True)
    except (OSError, ValueError):
        return None


def file_size(spec: ModelSpec) -> int:
    """Bytes of the model's (first) file; 0 when it has none here."""
    try:
        return spec.locate().stat().st_size
    except (OSError, ValueError):
        return 0
