"""The prompt cache without a model: the RAM tier's LRU accounting, the longest-prefix
lookup, the disk tier's file format, keys, bounds and damaged files, and the flags."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from parlance.config import ServeConfig
from parlance.engines.llamacpp import prompt_cache_disk
from parlance.engines.llamacpp.prompt_cache import (
    DEFAULT_RAM_CAP,
    MIN_SAVED_TOKENS,
    CacheSettings,
    Entry,
    PromptCache,
    RamTier,
    State,
    common_prefix,
    default_ram_bytes,
)
from parlance.engines.llamacpp.prompt_cache_disk import (
    DEFAULT_DISK_CAP,
    SUFFIX,
    DiskTier,
    Unusable,
    decode,
    default_disk_bytes,
    encode,
    key_digest,
)
from parlance.engines.metrics import EngineMetrics

FACTS = {"model": "/models/a.gguf", "size": 1, "n_ctx_seq": 512}
KEY = key_digest(FACTS)


def entry(tokens: range | list[int], size: int = 100) -> Entry:
    return Entry(tuple(tokens), bytes(size))


@pytest.mark.parametrize(("a", "b", "n"), [
    ([], [1], 0), ([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2], 2), ([1, 2, 3], [2], 0),
    (list(range(5000)), [*range(4321), -1], 4321), ((1, 2, 9), [1, 2, 3], 2),
])
def test_common_prefix(a, b, n):
    assert common_prefix(a, b) == n == common_prefix(b, a)


def test_the_ram_tier_evicts_the_least_recently_used_entry_to_stay_in_its_bound():
    ram = RamTier(capacity=3 * entry(range(10)).size)
    first, second, third = (entry(range(k, k + 10)) for k in (100, 200, 300))
    for e in (first, second, third):
        assert ram.put(e)
    ram.touch(first)  # used: now the newest
    assert ram.put(entry(range(400, 410)))
    assert ram.entries()[0] is third and second not in ram.entries()
    assert ram.bytes == 3 * first.size <= ram.capacity


def test_the_ram_tier_refuses_what_cannot_fit_or_is_held_already():
    ram = RamTier(capacity=500)
    assert not ram.put(entry(range(10), size=1000))
    assert ram.put(entry(range(20)))
    assert not ram.put(entry(range(15)))  # a prefix of an entry: covered
    assert ram.bytes == entry(range(20)).size and len(ram) == 1


def test_a_longer_entry_replaces_the_one_it_extends():
    ram = RamTier(capacity=10_000)
    ram.put(entry(range(20)))
    longer = entry(range(30))
    ram.put(longer)
    assert ram.entries() == [longer] and ram.bytes == longer.size


def test_the_lookup_finds_the_longest_shared_prefix_within_the_limit():
    ram = RamTier(capacity=10_000)
    short, long = entry([1, 2, 3, 4, 5]), entry([1, 2, 3, 4, 6, 7, 8, 9])
    ram.put(short)
    ram.put(long)
    prompt = [1, 2, 3, 4, 6, 7, 0]
    found = ram.longest(prompt, limit=len(prompt) - 1)
    assert found is not None and found.entry is long and found.length == 6
    assert ram.longest(prompt, limit=3).length == 3  # type: ignore[union-attr]
    assert ram.longest([9, 9], limit=1) is None


class FakeStates:
    """Sequence states as a dict: what a restore put where."""

    def __init__(self) -> None:
        self.seqs: dict[int, State] = {}

    def read(self, seq: int) -> State:
        return self.seqs.get(seq, b"")

    def write(self, seq: int, state: State) -> bool:
        self.seqs[seq] = state
        return True


def test_the_prompt_cache_saves_a_sequence_once_and_restores_it_counting_the_tokens(tmp_path):
    states, metrics = FakeStates(), EngineMetrics()
    cache = PromptCache(states, RamTier(1 << 20), None, metrics)
    tokens = list(range(MIN_SAVED_TOKENS + 10))
    states.seqs[0] = b"kv of seq 0"
    cache.save(0, tokens[:MIN_SAVED_TOKENS - 1])  # too short to keep
    assert len(cache.ram) == 0
    cache.save(0, tokens)
    states.seqs[0] = b"changed"
    cache.save(0, tokens)  # held already: not read again
    assert [e.state for e in cache.ram.entries()] == [b"kv of seq 0"]
    assert metrics.prompt_cache_ram_bytes == cache.ram.bytes > 0
    found = cache.lookup([*tokens[:20], -1], limit=20)
    assert found is not None and found.length == 20
    assert cache.restore(found, 1)
    assert states.seqs[1] == b"kv of seq 0"
    assert (metrics.prompt_cache_ram_hits, metrics.prompt_cache_ram_tokens_restored) == (1, 20)


# -- the disk tier ---------------------------------------------------------------------


def test_a_file_decodes_to_the_entry_it_encodes():
    saved = Entry((5, -1, 70000), b"\x00\x01state")
    back = decode(encode(saved, KEY), KEY)
    assert back.tokens == saved.tokens and back.state == saved.state


@pytest.mark.parametrize("damage", [
    lambda data: data[:-1],  # truncated
    lambda data: data[:10],  # shorter than its header
    lambda data: data[:40] + bytes([data[40] ^ 1]) + data[41:],  # a flipped bit in the key
    lambda data: data[:-40] + bytes([data[-40] ^ 1]) + data[-39:],  # ... in the state
    lambda data: b"X" + data[1:],  # another format
])
def test_a_damaged_file_is_unusable(damage):
    with pytest.raises(Unusable):
        decode(damage(encode(entry(range(20)), KEY)), KEY)


def test_a_file_for_other_facts_is_unusable():
    other = key_digest({**FACTS, "n_ctx_seq": 1024})
    assert other != KEY
    with pytest.raises(Unusable):
        decode(encode(entry(range(20)), other), KEY)


def written(disk: DiskTier) -> list[Path]:
    disk.close()
    return sorted(disk.directory.glob(f"*{SUFFIX}"))


def test_written_entries_are_found_by_another_tier_on_the_same_directory(tmp_path):
    disk = DiskTier(tmp_path, FACTS, 1 << 20)
    disk.write(entry(range(40)), wait=True)
    assert len(written(disk)) == 1
    later = DiskTier(tmp_path, FACTS, 1 << 20)  # a restart: the index is read on first use
    try:
        found = later.longest([*range(30), -1], limit=30)
        assert found is not None and found.length == 30 and found.tier == "disk"
        loaded = later.load(found.entry)
        assert loaded is not None and loaded.state == bytes(100)
        assert later.count == 1 and later.bytes == len(encode(entry(range(40)), KEY))
    finally:
        later.close()
    other = DiskTier(tmp_path, {**FACTS, "size": 2}, 1 << 20)  # another model file
    try:
        assert other.longest(list(range(30)), limit=29) is None
    finally:
        other.close()


class WatchedDisk(DiskTier):
    """A disk tier that says when its writer begins to wait for the engine (`holding`)."""

    def __init__(self, *args: object) -> None:
        self.holding = threading.Event()  # (before the writer thread starts)
        super().__init__(*args)  # type: ignore[arg-type]

    def _holding(self) -> None:
        self.holding.set()


def test_the_writer_waits_while_the_engine_runs_and_writes_once_it_is_idle(tmp_path):
    disk = WatchedDisk(tmp_path, FACTS, 1 << 20)
    disk.engine_busy(True)
    disk.write(entry(range(40)))
    assert disk.holding.wait(30)  # it holds the entry, and has written nothing
    assert not list(tmp_path.rglob(f"*{SUFFIX}")) and not list(tmp_path.rglob(".tmp-*"))
    disk.engine_busy(False)
    assert len(written(disk)) == 1


def test_a_state_larger_than_a_write_piece_reads_back_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(prompt_cache_disk, "WRITE_PIECE", 64)
    big = Entry(tuple(range(40)), bytes(range(256)) * 3 + b"tail")
    disk = DiskTier(tmp_path, FACTS, 1 << 20)
    disk.write(big, wait=True)
    (path,) = written(disk)
    assert path.read_bytes() == encode(big, KEY)
    back = decode(path.read_bytes(), KEY)
    assert (back.tokens, back.state) == (big.tokens, big.state)


class BlockedDisk(DiskTier):
    """A disk tier whose reads wait for `go` and note the thread they ran on."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.go = threading.Event()
        self.read_on: list[str] = []

    def load(self, stub: Entry) -> Entry | None:
        self.read_on.append(threading.current_thread().name)
        self.go.wait(30)
        return super().load(stub)


def test_a_prompt_waits_while_its_prefix_is_read_from_disk_on_another_thread(tmp_path):
    saved = entry(range(40))
    first = DiskTier(tmp_path, FACTS, 1 << 20)
    first.write(saved, wait=True)
    written(first)
    states, metrics = FakeStates(), EngineMetrics()
    disk = BlockedDisk(tmp_path, FACTS, 1 << 20)
    cache = PromptCache(states, RamTier(1 << 20), disk, metrics)
    prompt, ready = [*range(30), -1], threading.Event()
    try:
        assert cache.fetch(prompt, 30, 1, ready.set)  # the read started: the prompt waits
        assert cache.fetch(prompt, 30, 1, ready.set)  # (and is not started twice)
        disk.go.set()
        assert ready.wait(30)
        assert not cache.fetch(prompt, 30, 1, ready.set)  # read: the prompt goes on
        found = cache.lookup(prompt, 30)
        assert found is not None and found.tier == "disk"
        assert cache.restore(found, 1)
        assert states.seqs[1] == saved.state
        assert disk.read_on == ["parlance-kv-reader_0"]  # read once, never on this thread
        assert (metrics.prompt_cache_disk_hits,
                metrics.prompt_cache_disk_tokens_restored) == (1, 30)
        # held in RAM now: a later prompt needs no read
        assert not cache.fetch(prompt, 30, 1, ready.set) and disk.read_on == [
            "parlance-kv-reader_0"]
    finally:
        cache.close()


def test_nothing_is_read_ahead_when_ram_or_a_slot_holds_as_much_or_nothing_is_reused(tmp_path):
    disk = DiskTier(tmp_path, FACTS, 1 << 20)
    disk.write(entry(range(40)), wait=True)
    written(disk)
    disk = DiskTier(tmp_path, FACTS, 1 << 20)
    ram = RamTier(1 << 20)
    ram.put(entry(range(40)))
    cache = PromptCache(FakeStates(), ram, disk, EngineMetrics())
    try:
        assert not cache.fetch([*range(30), -1], 30, 1, lambda: None)
        assert not cache.fetch([*range(30), -1], 0, 1, lambda: None)  # prompt logprobs
        cache.ram.clear()
        assert not cache.fetch([*range(30), -1], 30, 31, lambda: None)  # a slot has it
    finally:
        cache.close()


def file_holding(disk: DiskTier, first_token: int) -> Path:
    return next(p for p in disk.directory.glob(f"*{SUFFIX}")
                if decode(p.read_bytes(), KEY).tokens[0] == first_token)


def test_the_disk_bound_evicts_the_least_recently_used_files(tmp_path):
    size = len(encode(entry(range(40)), KEY))
    disk = DiskTier(tmp_path, FACTS, 2 * size + 10)
    for k, start in enumerate((100, 200)):
        disk.write(entry(range(start, start + 40)), wait=True)
        disk.close()
        disk = DiskTier(tmp_path, FACTS, 2 * size + 10)
        then = time.time() - 100 + k
        os.utime(file_holding(disk, start), (then, then))
    used = disk.longest(list(range(100, 140)), limit=39)
    assert used is not None and disk.load(used.entry) is not None  # now the newest
    disk.write(entry(range(300, 340)), wait=True)
    files = written(disk)
    assert len(files) == 2 and sum(f.stat().st_size for f in files) <= 2 * size + 10
    survivor = DiskTier(tmp_path, FACTS, 1 << 20)
    try:
        assert survivor.longest(list(range(200, 240)), limit=39) is None
        assert survivor.longest(list(range(100, 140)), limit=39) is not None
    finally:
        survivor.close()


def test_damaged_and_foreign_files_are_removed_and_never_used(tmp_path):
    disk = DiskTier(tmp_path, FACTS, 1 << 20)
    disk.write(entry(range(40)), wait=True)
    disk.write(entry(range(500, 540)), wait=True)
    written(disk)
    first, second = file_holding(disk, 0), file_holding(disk, 500)
    data = bytearray(first.read_bytes())
    data[-50] ^= 0xFF  # the state: noticed only when loaded
    first.write_bytes(bytes(data))
    second.write_bytes(second.read_bytes()[:-7])  # truncated: noticed by the index
    foreign = first.with_name("foreign" + SUFFIX)
    foreign.write_bytes(encode(entry(range(40)), key_digest({"model": "other"})))
    stray = first.with_name("notes.txt")
    stray.write_text("left alone")
    later = DiskTier(tmp_path, FACTS, 1 << 20)
    try:
        assert later.longest(list(range(500, 540)), limit=39) is None
        assert not second.exists() and not foreign.exists() and stray.exists()
        found = later.longest(list(range(40)), limit=39)
        assert found is not None and later.load(found.entry) is None
        assert not first.exists() and later.count == 0
    finally:
        later.close()


def test_a_full_write_queue_drops_the_write_instead_of_waiting(tmp_path):
    disk = DiskTier(tmp_path, FACTS, 1 << 20)
    disk.close()  # no writer: nothing drains the queue
    for k in range(10):
        disk.write(entry(range(k * 100, k * 100 + 40)))
    assert disk.dropped > 0


# -- settings ----------------------------------------------------------------------------


def test_the_defaults_follow_free_memory_and_disk_space():
    assert default_ram_bytes(None) == DEFAULT_RAM_CAP
    assert default_ram_bytes(8 << 30) == 1 << 30
    assert default_ram_bytes(64 << 30) == DEFAULT_RAM_CAP
    assert default_disk_bytes(10 << 30) == 1 << 30
    assert default_disk_bytes(1 << 40) == DEFAULT_DISK_CAP


def test_the_flags_set_the_tiers_and_zero_turns_them_off(tmp_path, capsys):
    from parlance.cli import prompt_cache_settings

    on = prompt_cache_settings(ServeConfig(data_dir=str(tmp_path), prompt_cache_mb=64,
                                           prompt_cache_disk_mb=128))
    assert on == CacheSettings(64 << 20, 128 << 20, tmp_path / "prompt-cache")
    assert "64 MiB in RAM, 128 MiB on disk" in capsys.readouterr().err
    off = prompt_cache_settings(ServeConfig(data_dir=str(tmp_path), prompt_cache_mb=0,
                                            prompt_cache_disk_mb=0))
    assert not off.enabled
    assert "off in RAM, off on disk" in capsys.readouterr().err
    default = prompt_cache_settings(ServeConfig(data_dir=str(tmp_path)))
    assert 0 < default.ram_bytes <= DEFAULT_RAM_CAP
    assert 0 < default.disk_bytes <= DEFAULT_DISK_CAP


def test_metrics_show_each_tier():
    from parlance.server.endpoints.metrics import render_prometheus

    metrics = EngineMetrics(prompt_cache_ram_hits=2, prompt_cache_disk_tokens_restored=900,
                            prompt_cache_disk_bytes=12345)
    text = render_prometheus([("m", metrics)])
    assert 'parlance_prompt_cache_ram_hits_total{model="m"} 2' in text
    assert 'parlance_prompt_cache_disk_tokens_restored_total{model="m"} 900' in text
    assert 'parlance_prompt_cache_disk_bytes{model="m"} 12345' in text
