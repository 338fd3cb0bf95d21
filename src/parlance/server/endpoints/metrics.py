"""`GET /metrics`: every served engine's metrics in the Prometheus text format (0.0.4),
and those of any other component that exports some (`engines.metrics.ExportsMetrics`:
the upstream replicas)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from parlance.dialects.openai.errors import render_error
from parlance.engines.metrics import (
    EngineMetrics,
    ExportsMetrics,
    Histogram,
    MetricFamily,
    MetricKind,
)
from parlance.models.served import ServedModels
from parlance.server.endpoints.answering import answering
from parlance.server.settings import ServerSettings

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (name, type, help, attribute of EngineMetrics)
FAMILIES: tuple[tuple[str, MetricKind, str, str], ...] = (
    ("requests_running", "gauge", "Requests being decoded now.", "requests_running"),
    ("requests_waiting", "gauge", "Requests waiting for a slot.", "requests_waiting"),
    ("slots_in_use", "gauge", "Slots (sequences) in use.", "slots_in_use"),
    ("slots_total", "gauge", "Slots the engine decodes together.", "slots_total"),
    ("requests_rejected_total", "counter", "Requests refused with 429: queue full.",
     "requests_rejected"),
    ("tokens_generated_total", "counter", "Tokens generated.", "tokens_generated"),
    ("prompt_tokens_evaluated_total", "counter", "Prompt tokens evaluated.",
     "prompt_tokens_evaluated"),
    ("prompt_tokens_cached_total", "counter", "Prompt tokens reused from the KV cache.",
     "prompt_tokens_cached"),
    ("prefix_cache_hits_total", "counter", "Prompts that reused a cached prefix.",
     "prefix_cache_hits"),
    ("speculative_tokens_drafted_total", "counter", "Draft tokens verified by "
     "speculative decoding.", "speculative_tokens_drafted"),
    ("speculative_tokens_accepted_total", "counter", "Draft tokens speculative decoding "
     "accepted.", "speculative_tokens_accepted"),
    ("prompt_cache_ram_hits_total", "counter", "Prompts restored from the RAM prompt cache.",
     "prompt_cache_ram_hits"),
    ("prompt_cache_ram_tokens_restored_total", "counter", "Prompt tokens restored from the "
     "RAM prompt cache.", "prompt_cache_ram_tokens_restored"),
    ("prompt_cache_ram_bytes", "gauge", "Bytes the RAM prompt cache holds.",
     "prompt_cache_ram_bytes"),
    ("prompt_cache_ram_entries", "gauge", "Entries the RAM prompt cache holds.",
     "prompt_cache_ram_entries"),
    ("prompt_cache_disk_hits_total", "counter", "Prompts restored from the disk prompt "
     "cache.", "prompt_cache_disk_hits"),
    ("prompt_cache_disk_tokens_restored_total", "counter", "Prompt tokens restored from the "
     "disk prompt cache.", "prompt_cache_disk_tokens_restored"),
    ("prompt_cache_disk_bytes", "gauge", "Bytes of this model's disk prompt cache files.",
     "prompt_cache_disk_bytes"),
    ("prompt_cache_disk_entries", "gauge", "Files of this model's disk prompt cache.",
     "prompt_cache_disk_entries"),
    ("prompt_cache_disk_writes_dropped_total", "counter", "Disk prompt cache writes dropped "
     "because the writer was behind.", "prompt_cache_disk_writes_dropped"),
    ("embedding_requests", "gauge", "Embedding requests running or waiting.",
     "embedding_requests"),
    ("embedding_inputs_total", "counter", "Inputs embedded.", "embedding_inputs"),
    ("time_to_first_token_seconds", "histogram", "Request start to first token.",
     "time_to_first_token"),
    ("inter_token_latency_seconds", "histogram", "Time between consecutive tokens.",
     "inter_token"),
)


def engine_families(by_model: list[tuple[str, EngineMetrics]]) -> list[MetricFamily]:
    """The engines' own metrics, one sample per served model (labelled `model`)."""
    return [MetricFamily(name, kind, help_text, "model",
                         tuple((model, getattr(metrics, attribute)) for model, metrics in by_model))
            for name, kind, help_text, attribute in FAMILIES]


def render_prometheus(by_model: list[tuple[str, EngineMetrics]]) -> str:
    return render(engine_families(by_model))


def render(families: list[MetricFamily]) -> str:
    """Prometheus text (0.0.4): each family's help and type, then its samples."""
    lines: list[str] = []
    for family in families:
        full = f"parlance_{family.name}"
        lines += [f"# HELP {full} {family.help}", f"# TYPE {full} {family.kind}"]
        for instance, value in family.samples:
            label = f'{family.label}="{_escape(instance)}"'
            if isinstance(value, Histogram):
                lines += _histogram(full, label, value)
            else:
                lines.append(f"{full}{{{label}}} {value}")
    return "\n".join(lines) + "\n"


def _histogram(name: str, label: str, histogram: Histogram) -> list[str]:
    lines = [f'{name}_bucket{{{label},le="{bound}"}} {count}'
             for bound, count in histogram.cumulative()]
    lines.append(f"{name}_sum{{{label}}} {histogram.total}")
    lines.append(f"{name}_count{{{label}}} {histogram.count}")
    return lines


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class MetricsEndpoint:
    def __init__(self, models: ServedModels, settings: ServerSettings) -> None:
        self.models = models
        self.scrape = answering(self._scrape, settings.api_keys, render_error)

    async def _scrape(self, request: Request) -> Response:
        families = engine_families([(m.spec.id, m.engine.metrics) for m in self.models])
        upstreams = self.models.upstreams
        if isinstance(upstreams, ExportsMetrics):
            families += upstreams.metric_families()
        return Response(render(families), media_type=CONTENT_TYPE)
