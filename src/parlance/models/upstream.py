"""The models upstream servers serve, as served models beside the local ones.

They are always "loaded": nothing is loaded or unloaded here, and they take no
memory budget. A local model with the same id wins (it is listed once)."""

from __future__ import annotations

import time
from pathlib import Path

from parlance.engines.metrics import MetricFamily
from parlance.engines.upstream import Fleet
from parlance.engines.upstream.replica_metrics import replica_families
from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModel


def upstream_spec(model: str) -> ModelSpec:
    def locate() -> Path:
        raise FileNotFoundError(f"'{model}' is served by upstream servers; it has no file here")

    return ModelSpec(id=model, locate=locate)


class UpstreamModels:
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._served: dict[str, ServedModel] = {}

    def served(self) -> list[ServedModel]:
        """The models some replica serves now (each keeps its `created` time)."""
        out = []
        for engine in self.fleet.engines():
            model = self._served.get(engine.model)
            if model is None or model.engine is not engine:
                model = ServedModel(upstream_spec(engine.model), engine, int(time.time()))
                self._served[engine.model] = model
            out.append(model)
        return out

    def metric_families(self) -> list[MetricFamily]:
        """The replicas' metrics (`engines.metrics.ExportsMetrics`), for `GET /metrics`."""
        return replica_families(self.fleet.replicas)

    async def start(self) -> None:
        await self.fleet.start()

    async def aclose(self) -> None:
        await self.fleet.aclose()
