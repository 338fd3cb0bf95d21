"""The one cached reader of model files' headers: a file is read again only when its
modification time or size changed, and a model with no readable file has no header."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from parlance.models import headers
from parlance.models.gguf import read_gguf_header
from parlance.models.registry import ModelSpec
from tests.support.gguf_writer import BASE_KV, TENSORS, write_gguf


def spec_at(path: Path) -> ModelSpec:
    return ModelSpec(id=path.stem, locate=lambda: path)


@pytest.fixture
def reads(monkeypatch) -> list[Path]:
    """The paths whose header was read from the file."""
    seen: list[Path] = []

    def counting(path: Path, **kwargs):
        seen.append(path)
        return read_gguf_header(path, **kwargs)

    monkeypatch.setattr(headers, "read_gguf_header", counting)
    return seen


def test_a_header_is_read_once_per_version_of_its_file(tmp_path, reads):
    path = tmp_path / "tiny.gguf"
    write_gguf(path, BASE_KV, TENSORS)
    spec = spec_at(path)
    first = headers.header_of(spec)
    assert first is not None and headers.header_of(spec) is first
    assert reads == [path]

    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    touched = headers.header_of(spec)
    assert reads == [path, path]  # a new modification time: read again
    assert touched is not None and touched.modified_ns == stat.st_mtime_ns + 1_000_000_000

    with path.open("ab") as f:  # a new size (same modification time): read again
        f.write(b"\0" * 7)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    grown = headers.header_of(spec)
    assert reads == [path, path, path]
    assert grown is not None and grown.size == touched.size + 7
    assert headers.header_of(spec) is grown and len(reads) == 3


def test_what_the_header_says_of_a_model(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_gguf(path, BASE_KV, TENSORS)
    found = headers.header_of(spec_at(path))
    assert found is not None
    assert found.info.architecture == "llama" and found.info.quantization == "Q4_K_M"
    assert found.header.array_lengths["tokenizer.ggml.tokens"] == 1000
    assert found.digest.startswith("sha256:") and found.size == path.stat().st_size


def test_a_model_without_a_readable_file_has_no_header(tmp_path):
    def nowhere() -> Path:
        raise FileNotFoundError("served by an upstream server")

    assert headers.header_of(ModelSpec(id="remote", locate=nowhere)) is None
    assert headers.file_size(ModelSpec(id="remote", locate=nowhere)) == 0
    not_gguf = tmp_path / "weights.gguf"
    not_gguf.write_bytes(b"not a gguf file at all")
    assert headers.header_of(spec_at(not_gguf)) is None
    assert headers.whole_header(spec_at(not_gguf)) is None
    assert headers.file_size(spec_at(not_gguf)) == len(b"not a gguf file at all")


def test_the_whole_header_keeps_every_array_and_is_never_cached(tmp_path, reads):
    path = tmp_path / "tiny.gguf"
    write_gguf(path, BASE_KV, TENSORS)
    whole = headers.whole_header(spec_at(path))
    assert whole is not None and len(whole.metadata["tokenizer.ggml.tokens"]) == 1000
    headers.whole_header(spec_at(path))
    assert reads == [path, path]
