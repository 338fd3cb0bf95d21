"""Evaluated prompt prefixes kept beyond the slots: a sequence's tokens and its KV state.

A slot holds one cached prefix, and a prompt that shares nothing with it takes it
over: with more conversations than slots (a second agent, a sub-agent, a chat
page), the agent's next turn would start from zero. Before a free slot gives up
its tokens, its sequence state (llama.cpp's per-sequence KV bytes) is saved here;
a later prompt sharing a longer prefix with an entry than with any slot gets that
entry restored into its slot and evaluates only the rest.

Two tiers: `RamTier`, an LRU bounded in bytes, and an optional `PersistentTier` that
outlives the process (`prompt_cache_disk.DiskTier`, files in `prompt_cache_file.py`'s
format); both hold `prompt_cache_entry.Entry`s. Everything here runs on the
scheduler thread, between steps; the disk tier writes on a thread of its own, and an
entry a prompt needs from disk is read on another (`fetch`): reading tens of MB on the
scheduler thread would pause every running stream meanwhile.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from parlance.engines.llamacpp.prompt_cache_entry import Entry, Found, State, common_prefix
from parlance.engines.metrics import EngineMetrics

# A slot is saved when giving it up loses at least this many tokens, and an entry is
# restored when it saves this many over what the slots offer: below that, evaluating
# the tokens costs about as much as copying the state (a few µs per cell).
MIN_SAVED_TOKENS = 16
DEFAULT_RAM_CAP = 2 << 30  # bytes: the RAM tier's default is the least of this and
RAM_SHARE = 8  # 1/8 of the available memory


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """`ram_bytes`/`disk_bytes` 0: that tier is off. `directory`: where the disk tier
    keeps its files (one sub-directory per model and context layout)."""

    ram_bytes: int = 0
    disk_bytes: int = 0
    directory: Path | None = None

    @property
    def enabled(self) -> bool:
        return self.ram_bytes > 0 or (self.disk_bytes > 0 and self.directory is not None)


NO_PROMPT_CACHE = CacheSettings()


def default_ram_bytes(available: int | None) -> int:
    """min(1/8 of the available memory, 2 GiB); 2 GiB when it cannot be read."""
    return DEFAULT_RAM_CAP if available is None else min(DEFAULT_RAM_CAP,
                                                         available // RAM_SHARE)


class RamTier:
    """An LRU of entries bounded in bytes. An entry whose tokens extend another's
    replaces it (the longer one serves every prompt the shorter one does)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.bytes = 0
        self._entries: OrderedDict[int, Entry] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def covers(self, tokens: list[int] | tuple[int, ...]) -> bool:
        """Whether an entry holds these tokens already (as its prefix or whole)."""
        n = len(tokens)
        return any(len(e.tokens) >= n and common_prefix(e.tokens, tokens) == n
                   for e in self._entries.values())

    def put(self, entry: Entry) -> bool:
        """Keep `entry`, evicting the least recently used; False when it cannot fit or is
        covered already."""
        if entry.size > self.capacity or self.covers(entry.tokens):
            return False
        for key, old in list(self._entries.items()):
            if common_prefix(old.tokens, entry.tokens) == len(old.tokens):
                self._remove(key)
        while self.bytes + entry.size > self.capacity:
            self._remove(next(iter(self._entries)))
        self._entries[id(entry)] = entry
        self.bytes += entry.size
        return True

    def longest(self, prompt: list[int], limit: int) -> Found | None:
        best: Found | None = None
        for entry in self._entries.values():
            length = min(common_prefix(entry.tokens, prompt), limit)
            if length and (best is None or length > best.length):
                best = Found(entry, length, "ram")
        return best

    def touch(self, entry: Entry) -> None:
        if id(entry) in self._entries:
            self._entries.move_to_end(id(entry))

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def _remove(self, key: int) -> None:
        self.bytes -= self._entries.pop(key).size


class Tier(Protocol):
    """What a lookup asks of a tier (`RamTier`, `PersistentTier`)."""

    def covers(self, tokens: list[int] | tuple[int, ...]) -> bool:
        """Whether an entry holds these tokens already (as its prefix or whole)."""

    def longest(self, prompt: list[int], limit: int) -> Found | None:
        """The entry sharing the longest prefix with `prompt` (at most `limit` tokens)."""


class PersistentTier(Tier, Protocol):
    """A tier that outlives the process (`prompt_cache_disk.DiskTier`): its lookups
    answer stubs (tokens, no state) whose state `load` reads, from an index in memory
    that `refresh` brings up to date (lookups run on the scheduler's thread; `load` and
    `refresh` never do); it writes on a thread of its own, only while the engine is
    idle."""

    dropped: int  # writes dropped because its queue was full

    @property
    def bytes(self) -> int:
        """What its entries take."""

    @property
    def count(self) -> int:
        """How many entries it holds."""

    def load(self, stub: Entry) -> Entry | None:
        """The whole entry behind a lookup's answer; None when it is gone or damaged."""

    def refresh(self) -> None:
        """Read the index again if the files changed (another process wrote)."""

    def write(self, entry: Entry, *, wait: bool = False) -> None:
        """Queue `entry`; `wait`: for room in the queue (at shutdown), else dropped."""

    def engine_busy(self, busy: bool) -> None: ...

    def close(self) -> None: ...


class SequenceStates(Protocol):
    """Reads and writes one sequence's KV state (llama.cpp's `llama_state_seq_*`)."""

    def read(self, seq: int) -> State: ...

    def write(self, seq: int, state: State) -> bool: ...


class PromptCache:
    """Both tiers behind one face for the slot table: `save` a slot's sequence before
    it is lost, `lookup` the longest prefix of a prompt, `restore` it into a slot."""

    def __init__(self, states: SequenceStates, ram: RamTier,
                 disk: PersistentTier | None,
                 metrics: EngineMetrics) -> None:
        self._states = states
        self.ram = ram
        self.disk = disk
        self._metrics = metrics
        # disk entries read (or being read) for a waiting prompt, by their tokens
        self._reads: dict[tuple[int, ...], Future[Entry | None]] = {}
        self._reader = (ThreadPoolExecutor(1, thread_name_prefix="parlance-kv-reader")
                        if disk is not None else None)
        # the disk tier's index brought up to date for the prompt being admitted
        self._refresh: Future[None] | None = None
        self._publish()

    def save(self, seq: int, tokens: list[int]) -> None:
        """Keep sequence `seq` (holding `tokens`) unless a tier holds it already."""
        if len(tokens) < MIN_SAVED_TOKENS:
            return
        in_ram = self.ram.capacity == 0 or self.ram.covers(tokens)
        on_disk = self.disk is None or self.disk.covers(tokens)
        if in_ram and on_disk:
            return
        entry = Entry(tuple(tokens), self._states.read(seq))
        if not entry.state:
            return
        if not in_ram:
            self.ram.put(entry)
        if not on_disk and self.disk is not None:
            self.disk.write(entry)
        self._publish()

    def flush(self, seq: int, tokens: list[int]) -> None:
        """At shutdown: a slot's sequence goes to disk (the RAM tier ends with the process),
        waiting for room in the writer's queue."""
        if self.disk is None or len(tokens) < MIN_SAVED_TOKENS or self.disk.covers(tokens):
            return
        state = self._states.read(seq)
        if state:
            self.disk.write(Entry(tuple(tokens), state), wait=True)

    def lookup(self, prompt: list[int], limit: int) -> Found | None:
        found = self.ram.longest(prompt, limit)
        if self.disk is not None:
            on_disk = self.disk.longest(prompt, limit)
            if on_disk is not None and (found is None or on_disk.length > found.length):
                return on_disk
        return found

    def fetch(self, prompt: list[int], limit: int, at_least: int,
              ready: Callable[[], None]) -> bool:
        """Whether the prompt should wait for its longest prefix to be read from disk: True
        while that read runs on the reader thread (started here; `ready` is called when it
        ends), False once it is read, or when what is on disk is shorter than `at_least`
        (what is worth restoring over the slots' prefixes) or than the RAM tier's."""
        if self.disk is None or self._reader is None or limit <= 0:
            return False
        if self._refresh is None:  # the directory is looked at on the reader thread
            self._refresh = self._reader.submit(self.disk.refresh)
            self._refresh.add_done_callback(lambda _: ready())
        if not self._refresh.done():
            return True
        on_disk = self.disk.longest(prompt, limit)
        if on_disk is None or on_disk.length < at_least:
            return False
        in_ram = self.ram.longest(prompt, limit)
        if in_ram is not None and in_ram.length >= on_disk.length:
            return False
        key = on_disk.entry.tokens
        read = self._reads.get(key)
        if read is None:
            read = self._reads[key] = self._reader.submit(self.disk.load, on_disk.entry)
            read.add_done_callback(lambda _: ready())
        return not read.done()

    def fetched(self) -> None:
        """The waiting prompt took its slot: reads nobody restored are let go, and the
        next prompt looks at the directory again."""
        self._reads = {k: r for k, r in self._reads.items() if not r.done()}
        if self._refresh is not None and self._refresh.done():
            self._refresh = None

    def restore(self, found: Found, seq: int) -> bool:
        """Write the entry's state into sequence `seq` (emptied first); False if the entry
        turned out unusable (a disk file that fails its checksum is removed). A disk entry
        comes only from its `fetch` (files are never read on the scheduler's thread):
        one not read yet is a miss."""
        entry: Entry | None = found.entry
        if found.tier == "disk" and self.disk is not None:
            read = self._reads.pop(found.entry.tokens, None)
            entry = read.result() if read is not None and read.done() else None
        if entry is None or not self._states.write(seq, entry.state):
            return False
        metrics = self._metrics
        if found.tier == "ram":
            self.ram.touch(entry)
            metrics.prompt_cache_ram_hits += 1
            metrics.prompt_cache_ram_tokens_restored += found.length
        else:
            self.ram.put(entry)  # read once from disk, kept at hand
            metrics.prompt_cache_disk_hits += 1
            metrics.prompt_cache_disk_tokens_restored += found.length
        self._publish()
        return True

    def engine_busy(self, busy: bool) -> None:
        """The engine started or stopped running requests: the disk tier writes only
        while it runs nothing."""
        if self.disk is not None:
            self.disk.engine_busy(busy)

    def clear(self) -> None:
        self.ram.clear()
        self._publish()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.shutdown(wait=True, cancel_futures=True)
        self._reads.clear()
        if self.disk is not None:
            self.disk.close()
        self._publish()

    def _publish(self) -> None:
        metrics = self._metrics
        metrics.prompt_cache_ram_bytes = self.ram.bytes
        metrics.prompt_cache_ram_entries = len(self.ram)
        if self.disk is not None:
            metrics.prompt_cache_disk_bytes = self.disk.bytes
            metrics.prompt_cache_disk_entries = self.disk.count
            metrics.prompt_cache_disk_writes_dropped = self.disk.dropped
