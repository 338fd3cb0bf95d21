"""Engine metrics, neutral: counters, gauges and histograms an engine updates and the
server renders (Prometheus text at `GET /metrics`), and `MetricFamily`, the form in
which any other component (the upstream replicas) hands the server its metrics, so the
server renders them without knowing the component.

Written by the engine's own thread, read by the server; single int/float
updates are atomic under the GIL, and a scrape may see a histogram mid-update
by one observation, which Prometheus tolerates.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

MetricKind = Literal["gauge", "counter", "histogram"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(slots=True)
class Histogram:
    buckets: tuple[float, ...] = LATENCY_BUCKETS
    counts: list[int] = field(default_factory=list)  # per bucket, plus +Inf last
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(upper bound label, cumulative count) pairs, ending with +Inf."""
        bounds = [repr(b) for b in self.buckets] + ["+Inf"]
        out, running = [], 0
        for bound, n in zip(bounds, self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


@dataclass(slots=True)
class EngineMetrics:
    slots_total: int = 1
    slots_in_use: int = 0
    requests_running: int = 0
    requests_waiting: int = 0
    requests_rejected: int = 0
    tokens_generated: int = 0
    prompt_tokens_evaluated: int = 0
    prompt_tokens_cached: int = 0
    prefix_cache_hits: int = 0
    # The prompt cache beyond the slots, per tier (ram, disk): restores, the prompt
    # tokens they spared, and what each tier holds now
    prompt_cache_ram_hits: int = 0
    prompt_cache_ram_tokens_restored: int = 0
    prompt_cache_ram_bytes: int = 0
    prompt_cache_ram_entries: int = 0
    prompt_cache_disk_hits: int = 0
    prompt_cache_disk_tokens_restored: int = 0
    prompt_cache_disk_bytes: int = 0
    prompt_cache_disk_entries: int = 0
    prompt_cache_disk_writes_dropped: int = 0
    # Speculative decoding: draft tokens put in a decode step to be verified, and those
    # the target model's own choice kept (each is a token generated without a step)
    speculative_tokens_drafted: int = 0
    speculative_tokens_accepted: int = 0
    embedding_requests: int = 0  # embedding requests running or waiting (not slots)
    embedding_inputs: int = 0  # inputs embedded, in all
    time_to_first_token: Histogram = field(default_factory=Histogram)
    inter_token: Histogram = field(default_factory=Histogram)

    @property
    def idle(self) -> bool:
        return not (self.slots_in_use or self.requests_running or self.requests_waiting
                    or self.embedding_requests)


Sample = int | float | Histogram  # one instance's value of a metric


@dataclass(frozen=True, slots=True)
class MetricFamily:
    """One metric of a component, for every instance of it: its name (the server adds
    `parlance_`), type and help, the label that names an instance, and one sample per
    instance: (that label's value, the value)."""

    name: str
    kind: MetricKind
    help: str
    label: str
    samples: tuple[tuple[str, Sample], ...]


@runtime_checkable
class ExportsMetrics(Protocol):
    """A component whose metrics `GET /metrics` shows beside the engines' own."""

    def metric_families(self) -> list[MetricFamily]: ...
