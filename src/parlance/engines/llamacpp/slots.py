"""The KV cache seen as slots: one llama.cpp sequence id per slot, and the tokens
each holds, position by position.

A finished sequence leaves its tokens cached in its (now free) slot. A new
prompt starts from the longest prefix of it already evaluated anywhere, cached
or running (a shared system prompt), copied into the slot it gets
(`kv_state.copy_sequence`). With a KV stream per slot, new sequences take the lowest
free slots (see `_next_free`) and a copy moves every cell of the sequence, so it is made
only when it saves `MIN_STREAM_COPY` tokens over the prefix that slot holds
already (in a burst of chats, each slot still holds the shared system prompt);
in a unified cache a copy only tags cells and a free cached slot is reused in
place. Cached slots are the first cells given up when the cache runs full.

With a prompt cache (`prompt_cache.py`), a free slot's sequence is saved there
before the slot gives it up, and a prompt sharing a longer prefix with a saved
entry than with any slot gets that entry restored into its slot.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import llama_cpp

from parlance.core.errors import EngineFailure
from parlance.engines.llamacpp.prompt_cache import MIN_SAVED_TOKENS, PromptCache
from parlance.engines.llamacpp.prompt_cache_entry import common_prefix

# A copy across KV streams moves the sequence's cells, yet costs about as much as
# evaluating two prompt tokens (bench/engine_choices.py, 2048 cells a slot: 7 ms vs
# 123 ms for 30 tokens, measured for llama.cpp's copy of the whole stream buffer, which
# moves more): copy when it saves this many.
MIN_STREAM_COPY = 4


@dataclass(slots=True)
class Slot:
    id: int
    tokens: list[int] = field(default_factory=list)  # the KV cache of this sequence id
    busy: bool = False
    used_at: int = 0


@dataclass(frozen=True, slots=True)
class Claim:
    leader: Slot
    followers: list[Slot]
    reused: int  # prompt tokens already in the leader's cache


class SlotTable:
    def __init__(self, memory: ctypes.c_void_p, count: int, *, unified: bool,
                 copy: Callable[[int, int], bool], cache: PromptCache | None = None) -> None:
        self._memory = memory
        self._copy_cells = copy  # kv_state.copy_sequence: source's cells into target, now
        self._unified = unified
        self.cache = cache
        self.slots = [Slot(i) for i in range(count)]
        self._clock = itertools.count(1)

    @property
    def free(self) -> int:
        return sum(not s.busy for s in self.slots)

    @property
    def busy(self) -> int:
        return len(self.slots) - self.free

    def cells_in_use(self) -> int:
        """KV cells running sequences hold (an upper bound: copies share cells)."""
        return sum(len(s.tokens) for s in self.slots if s.busy)

    def fetching(self, prompt: list[int], *, reuse: bool, ready: Callable[[], None]) -> bool:
        """Whether the prompt waits for its saved prefix to be read from disk (off this
        thread; `ready` is called when it is read)."""
        if self.cache is None or not reuse:
            return False
        limit = len(prompt) - 1
        floor = max(min(common_prefix(s.tokens, prompt), limit) for s in self.slots)
        return self.cache.fetch(prompt, limit, floor + MIN_STREAM_COPY, ready)

    def claim(self, prompt: list[int], n: int, *, reuse: bool) -> Claim:
        """Take `n` free slots for a prompt; the leader starts with the longest cached prefix."""
        limit = len(prompt) - 1 if reuse else 0  # always evaluate one token for fresh logits
        best, common = None, 0
        for slot in self.slots:
            if (length := min(common_prefix(slot.tokens, prompt), limit)) > common:
                best, common = slot, length
        # A unified cache has no streams to keep together: reuse in place.
        in_place = self._unified and best is not None and not best.busy
        leader = best if in_place and best is not None else self._next_free()
        own = min(common_prefix(leader.tokens, prompt), limit)  # what the leader holds already
        restored = self._restore(leader, prompt, limit, max(common, own)) if limit else 0
        own = min(own, len(leader.tokens))  # (a failed restore leaves the leader empty)
        gain = common - own
        if restored:
            common = restored
        elif (best is not None and best is not leader and gain > 0
                and (self._unified or gain >= MIN_STREAM_COPY)):
            self._give_up(leader, 0)
            if not self._copy(best, leader):
                common = 0
        else:
            common = own
        self._give_up(leader, common)
        self._take(leader)
        followers = []
        for _ in range(n - 1):
            follower = self._next_free()
            self._give_up(follower, 0)
            self._take(follower)
            followers.append(follower)
        if self.cache is not None:
            self.cache.fetched()
        return Claim(leader, followers, common)

    def fork(self, leader: Slot, followers: list[Slot]) -> None:
        """Share the leader's evaluated prompt with each follower (no recomputation)."""
        for follower in followers:
            self._truncate(follower, 0)
            if not self._copy(leader, follower):
                raise EngineFailure("llama.cpp refused to copy a prompt's cache to another "
                                    "choice's slot")

    def release(self, slot: Slot, *, keep: bool) -> None:
        """Free a slot; `keep` leaves its tokens cached for a later prefix match."""
        slot.busy = False
        slot.used_at = next(self._clock)
        if not keep:
            self._truncate(slot, 0)

    def evict_one(self) -> bool:
        """Drop the least recently used cached prefix of a free slot; False if none is left."""
        cached = [s for s in self.slots if not s.busy and s.tokens]
        if not cached:
            return False
        self._give_up(min(cached, key=lambda s: s.used_at), 0)
        return True

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self._memory, True)
        for slot in self.slots:
            slot.tokens = []
        if self.cache is not None:
            self.cache.clear()

    def flush(self) -> None:
        """At shutdown: every free slot's prefix goes to the cache's disk tier."""
        if self.cache is not None:
            for slot in self.slots:
                if not slot.busy:
                    self.cache.flush(slot.id, slot.tokens)

    def _restore(self, leader: Slot, prompt: list[int], limit: int, floor: int) -> int:
        """Restore into the leader the saved entry sharing the longest prefix with the
        prompt, when it beats `floor` (what the slots offer); the tokens restored."""
        found = self.cache.lookup(prompt, limit) if self.cache is not None else None
        if self.cache is None or found is None or found.length < floor + MIN_STREAM_COPY:
            return 0
        self._give_up(leader, 0)
        if not self.cache.restore(found, leader.id):
            return 0
        leader.tokens = list(found.entry.tokens)
        return found.length

    def _give_up(self, slot: Slot, keep: int) -> None:
        """Truncate a free slot that a new sequence takes, first saving what it held in
        the prompt cache when that is worth keeping."""
        if self.cache is not None and len(slot.tokens) - keep >= MIN_SAVED_TOKENS:
            self.cache.save(slot.id, slot.tokens)
        self._truncate(slot, keep)

    def _copy(self, source: Slot, target: Slot) -> bool:
        """Target (emptied first) gets all of source's cells; False (and target empty)
        when llama.cpp refused them."""
        copied = self._copy_cells(source.id, target.id)
        target.tokens = list(source.tokens) if copied else []
        return copied

    def _next_free(self) -> Slot:
        """With a KV stream per slot, the lowest free slot: llama.cpp attends over the
        whole range of streams a batch touches (bench/engine_choices.py: a decode step
        in streams 0,5,10,15 takes 1.36× as long as in streams 0–3). In a unified
        cache, an empty slot, else the least recently used cache."""
        free = [s for s in self.slots if not s.busy]
        if not self._unified:
            return free[0]
        return min(free, key=lambda s: (bool(s.tokens), s.used_at))

    def _take(self, slot: Slot) -> None:
        slot.busy = True
        slot.used_at = next(self._clock)

    def _truncate(self, slot: Slot, keep: int) -> None:
        if len(slot.tokens) > keep:
            llama_cpp.llama_memory_seq_rm(self._memory, slot.id, keep, -1)
            del slot.tokens[keep:]
