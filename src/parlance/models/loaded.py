"""The models served right now: each `ServedModel` pairs a registry entry with the
engine that runs it. `Loaded` holds them for the parts of `ServedModels` (names,
loading, lifetime), which all look at the same list."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from parlance.engines.base import Engine
from parlance.models.load_plan import LoadOptions
from parlance.models.registry import ModelSpec


@dataclass(slots=True)
class ServedModel:
    """One model with a running engine: loaded into this process (llama.cpp), or served
    by upstream servers. Its memory, how it was loaded and when it was last used decide
    when it is unloaded."""

    spec: ModelSpec
    engine: Engine
    created: int
    size_bytes: int = 0  # its estimated memory (weights, KV cache, compute): the budget's unit
    jit: bool = False  # loaded on demand: unloaded after the idle TTL
    load_seconds: float | None = None
    last_used: float = field(default_factory=time.monotonic)
    options: LoadOptions = field(default_factory=LoadOptions)
    # Seconds it stays loaded once idle, as the last call asked (Ollama's keep_alive;
    # inf: forever); None: the server's rule (the idle TTL for models loaded on demand)
    keep_alive: float | None = None
    calls: int = 0  # the calls holding it now (their `ModelLease`s)

    @property
    def busy(self) -> bool:
        """A call holds it, or its engine still has work: never unloaded for being idle.
        (The engine alone does not tell: a call holds its model before its generation
        starts, between the rounds of a tool loop, and while a scripted engine waits.)"""
        return self.calls > 0 or not self.engine.metrics.idle

    @property
    def config(self) -> dict[str, Any]:
        """The load config as applied (what the engine ended up with)."""
        out: dict[str, Any] = {"context_length": self.engine.context_length,
                               "parallel": self.engine.slots}
        if self.options.eval_batch_size is not None:
            out["eval_batch_size"] = self.options.eval_batch_size
        return out


class Upstreams(Protocol):
    """Models served by upstream servers (`models.upstream.UpstreamModels`)."""

    def served(self) -> list[ServedModel]: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


class Loaded:
    """The models served now: `local` ones this process loaded (and may unload), then
    the upstream servers' (always there while a replica serves them)."""

    def __init__(self, local: list[ServedModel], upstreams: Upstreams | None) -> None:
        self.local = list(local)
        self.upstreams = upstreams

    def __iter__(self) -> Iterator[ServedModel]:
        return iter(self.local + self.remote())

    def remote(self) -> list[ServedModel]:
        """The upstream models, but for those a local model's id hides."""
        if self.upstreams is None:
            return []
        local = {m.spec.id for m in self.local}
        return [m for m in self.upstreams.served() if m.spec.id not in local]

    def find(self, model_id: str) -> ServedModel | None:
        return next((m for m in self if m.spec.id == model_id), None)

    async def aclose(self) -> None:
        """Unload every local model and stop the upstream replicas' work."""
        for model in list(self.local):
            await model.engine.aclose()
        self.local.clear()
        if self.upstreams is not None:
            await self.upstreams.aclose()
