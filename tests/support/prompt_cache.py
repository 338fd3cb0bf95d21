"""The prompt cache tests' shared pieces: a cache key's facts, small entries, a disk
tier's files once its writer has finished, sequence states kept in a dict."""

from __future__ import annotations

from pathlib import Path

from parlance.engines.llamacpp.prompt_cache_disk import DiskTier
from parlance.engines.llamacpp.prompt_cache_entry import Entry, State
from parlance.engines.llamacpp.prompt_cache_file import SUFFIX, key_digest

FACTS = {"model": "/models/a.gguf", "size": 1, "n_ctx_seq": 512}
KEY = key_digest(FACTS)


def entry(tokens: range | list[int], size: int = 100) -> Entry:
    return Entry(tuple(tokens), bytes(size))


def written(disk: DiskTier) -> list[Path]:
    """The tier's files, once its writer has written everything queued (and stopped)."""
    disk.close()
    return sorted(disk.directory.glob(f"*{SUFFIX}"))


class FakeStates:
    """Sequence states as a dict: what a restore put where."""

    def __init__(self) -> None:
        self.seqs: dict[int, State] = {}

    def read(self, seq: int) -> State:
        return self.seqs.get(seq, b"")

    def write(self, seq: int, state: State) -> bool:
        self.seqs[seq] = state
        return True
