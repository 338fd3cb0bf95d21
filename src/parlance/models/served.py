"""The models this server process is serving right now, each with its engine."""

from __future__ import annotations

from dataclasses import dataclass

from parlance.core.errors import ModelNotFound
from parlance.engines.base import Engine
from parlance.models.registry import ModelSpec


@dataclass(frozen=True, slots=True)
class ServedModel:
    spec: ModelSpec
    engine: Engine
    created: int


class ServedModels:
    def __init__(self, models: list[ServedModel]) -> None:
        if not models:
            raise ValueError("a server needs at least one model")
        self._models = models
        self.default = models[0]

    def __iter__(self):
        return iter(self._models)

    def resolve(self, requested: str | None) -> tuple[ServedModel, str]:
        """(model, the id to echo). An omitted model means the default one."""
        if not requested:
            return self.default, self.default.spec.id
        for model in self._models:
            if requested in model.spec.names():
                return model, requested
        raise ModelNotFound(requested)

    async def aclose(self) -> None:
        for model in self._models:
            await model.engine.aclose()
