"""Which replica takes a request: least outstanding requests (per unit of weight),
unless a replica holds the request's prompt prefix in its KV cache and is not much
busier than the least busy one (`AFFINITY_SLACK` more requests in flight), as
SGLang's cache-aware router does. Ties go round-robin so that an idle fleet
spreads its first requests."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Collection

from parlance.engines.upstream.affinity import AffinityTable
from parlance.engines.upstream.replica import Replica

AFFINITY_SLACK = 4.0


class Pool:
    """The replicas serving one model (as the fleet knows them now)."""

    def __init__(self, model: str, replicas: Callable[[], list[Replica]],
                 affinity: AffinityTable[Replica]) -> None:
        self.model = model
        self._replicas = replicas
        self.affinity = affinity
        self._turn = itertools.count()

    @property
    def replicas(self) -> list[Replica]:
        return [r for r in self._replicas() if self.model in r.models]

    def choose(self, keys: tuple[int, ...], exclude: Collection[Replica] = ()) -> Replica | None:
        """The replica for a prompt with these prefix keys (None: none is available),
        counted as taken (`Replica.acquire`)."""
        now = time.monotonic()
        candidates = [r for r in self.replicas if r not in exclude and r.available(now)]
        if not candidates:
            return None
        turn = next(self._turn)
        size = len(candidates)
        least = min(range(size), key=lambda i: (candidates[i].load(), (i - turn) % size))
        chosen = candidates[least]
        for holder in self.affinity.lookup(keys):
            if holder in candidates:
                if holder.load() <= chosen.load() + AFFINITY_SLACK / holder.weight:
                    holder.metrics.affinity_hits += 1
                    chosen = holder
                break
        chosen.acquire()
        return chosen

    def remember(self, keys: tuple[int, ...], replica: Replica) -> None:
        self.affinity.remember(keys, replica)
