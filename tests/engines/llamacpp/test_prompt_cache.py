"""The prompt cache without a model: the RAM tier's LRU accounting, the longest-prefix
lookup, saving and restoring through both tiers, reads ahead from disk, its metrics.
(The entry, the file format and the disk tier have their own test modules.)"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from parlance.engines.llamacpp.prompt_cache import (
    DEFAULT_RAM_CAP,
    MIN_SAVED_TOKENS,
    PromptCache,
    RamTier,
    default_ram_bytes,
)
from parlance.engines.llamacpp.prompt_cache_disk import DiskTier
from parlance.engines.llamacpp.prompt_cache_entry import Entry
from parlance.engines.metrics import EngineMetrics
from tests.support.prompt_cache import FACTS, FakeStates, entry, written


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



class BlockedDisk(DiskTier):
    """A disk tier whose reads say they began (`started`), wait for `go` and note the
    thread they ran on."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.go = threading.Event()
        self.started = threading.Event()  # a read began
        self.read_on: list[str] = []

    def load(self, stub: Entry) -> Entry | None:
        self.read_on.append(threading.current_thread().name)
        self.started.set()
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
    prompt = [*range(30), -1]
    ready = disk.started  # set when the index is read, and when the read begins or ends
    try:
        while not disk.read_on:  # the index is read (the prompt waits), then the entry
            assert cache.fetch(prompt, 30, 1, ready.set)
            assert ready.wait(30)
            ready.clear()
        assert cache.fetch(prompt, 30, 1, ready.set)  # the read runs: the prompt waits
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


def test_the_scheduler_thread_touches_no_file(tmp_path, monkeypatch):
    """Issue 39 item 4: admission (fetch, lookup, restore, save) runs on the scheduler's
    thread under its lock, where a file-system call that stalls (a FIFO, NFS, EIO)
    stalls every stream. The directory is listed and read on the reader thread only."""
    saved = entry(range(40))
    first = DiskTier(tmp_path, FACTS, 1 << 20)
    first.write(saved, wait=True)
    written(first)
    states = FakeStates()
    cache = PromptCache(states, RamTier(1 << 20), DiskTier(tmp_path, FACTS, 1 << 20),
                        EngineMetrics())
    here, calls = threading.current_thread(), []
    def watched(name: str) -> Callable[..., object]:
        real = getattr(os, name)

        def call(*args: object, **kw: object) -> object:
            if threading.current_thread() is here:
                calls.append(name)
            return real(*args, **kw)
        return call

    for name in ("stat", "lstat", "open", "listdir", "scandir", "utime"):
        monkeypatch.setattr(os, name, watched(name))
    prompt, ready = [*range(30), -1], threading.Event()
    try:
        while cache.fetch(prompt, 30, 1, ready.set):  # what the scheduler's admission does
            assert ready.wait(30)
            ready.clear()
        found = cache.lookup(prompt, 30)
        assert found is not None and found.tier == "disk" and cache.restore(found, 1)
        states.seqs[2] = bytes(100)
        cache.save(2, list(range(100, 140)))
        cache.fetched()
        assert calls == []
    finally:
        monkeypatch.undo()
        cache.close()


def test_nothing_is_read_ahead_when_ram_or_a_slot_holds_as_much_or_nothing_is_reused(tmp_path):
    disk = DiskTier(tmp_path, FACTS, 1 << 20)
    disk.write(entry(range(40)), wait=True)
    written(disk)
    disk = BlockedDisk(tmp_path, FACTS, 1 << 20)
    disk.go.set()
    ram = RamTier(1 << 20)
    ram.put(entry(range(40)))
    cache = PromptCache(FakeStates(), ram, disk, EngineMetrics())
    indexed = threading.Event()
    try:
        while cache.fetch([*range(30), -1], 30, 1, indexed.set):  # the index is read first
            assert indexed.wait(30)
            indexed.clear()
        assert not cache.fetch([*range(30), -1], 0, 1, lambda: None)  # prompt logprobs
        cache.ram.clear()
        assert not cache.fetch([*range(30), -1], 30, 31, lambda: None)  # a slot has it
        assert disk.read_on == []
    finally:
        cache.close()


def test_the_ram_default_follows_the_available_memory():
    assert default_ram_bytes(None) == DEFAULT_RAM_CAP
    assert default_ram_bytes(8 << 30) == 1 << 30
    assert default_ram_bytes(64 << 30) == DEFAULT_RAM_CAP


def test_metrics_show_each_tier():
    from parlance.server.endpoints.metrics import render_prometheus

    metrics = EngineMetrics(prompt_cache_ram_hits=2, prompt_cache_disk_tokens_restored=900,
                            prompt_cache_disk_bytes=12345)
    text = render_prometheus([("m", metrics)])
    assert 'parlance_prompt_cache_ram_hits_total{model="m"} 2' in text
    assert 'parlance_prompt_cache_disk_tokens_restored_total{model="m"} 900' in text
    assert 'parlance_prompt_cache_disk_bytes{model="m"} 12345' in text
