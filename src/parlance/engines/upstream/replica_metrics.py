"""The upstream replicas' metrics as the families `GET /metrics` shows, one sample per
replica (labelled `replica`, its URL without credentials)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from parlance.engines.metrics import MetricFamily, MetricKind, Sample
from parlance.engines.upstream.replica import Replica

# (name, type, help, how to read it off the replica)
FAMILIES: tuple[tuple[str, MetricKind, str, Callable[[Replica], Sample]], ...] = (
    ("upstream_healthy", "gauge", "1 while the replica takes requests (its circuit is "
     "not open).", lambda r: int(r.healthy)),
    ("upstream_requests_outstanding", "gauge", "Requests in flight to the replica.",
     lambda r: r.outstanding),
    ("upstream_requests_total", "counter", "Requests sent to the replica.",
     lambda r: r.metrics.requests),
    ("upstream_failures_total", "counter", "Refused connections, server errors and broken "
     "streams of the replica.", lambda r: r.metrics.failures),
    ("upstream_ejections_total", "counter", "Times the replica was taken out of its pools.",
     lambda r: r.metrics.ejections),
    ("upstream_affinity_routed_total", "counter", "Requests sent to the replica because it "
     "held their prompt prefix.", lambda r: r.metrics.affinity_hits),
    ("upstream_tokens_relayed_total", "counter", "Completion tokens the replica streamed.",
     lambda r: r.metrics.tokens_relayed),
    ("upstream_time_to_first_token_seconds", "histogram", "Request sent to the replica to "
     "its first token.", lambda r: r.metrics.time_to_first_token),
)


def replica_families(replicas: Iterable[Replica]) -> list[MetricFamily]:
    replicas = list(replicas)
    return [MetricFamily(name, kind, help_text, "replica",
                         tuple((replica.label, read(replica)) for replica in replicas))
            for name, kind, help_text, read in FAMILIES]
