"""The models this server process serves: those loaded now, each with its engine,
and those it may load on demand (just in time) from its catalog.

Loading is single-flight (concurrent requests for a cold model share one load,
and only the first one is told it caused it), stays within a memory budget by
unloading the least recently used idle models first, and models loaded just in
time are unloaded again after an idle TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from parlance.core.errors import EngineFailure, ModelNotFound, Overloaded, ParlanceError
from parlance.engines.base import Engine
from parlance.models.registry import ModelSpec

log = logging.getLogger("parlance.models")

Progress = Callable[[float], None]  # called from the loading thread


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """Load settings a client may choose (LM Studio's load endpoint, `context_length`
    on a chat that loads the model). None: the model's or the server's default."""

    context_length: int | None = None
    eval_batch_size: int | None = None
    parallel: int | None = None


Loader = Callable[[ModelSpec, LoadOptions, Progress | None], Engine]  # blocking


@dataclass(slots=True)
class ServedModel:
    spec: ModelSpec
    engine: Engine
    created: int
    size_bytes: int = 0
    jit: bool = False  # loaded on demand: unloaded after the idle TTL
    load_seconds: float | None = None
    last_used: float = field(default_factory=time.monotonic)
    options: LoadOptions = field(default_factory=LoadOptions)

    @property
    def config(self) -> dict[str, Any]:
        """The load config as applied (what the engine ended up with)."""
        out: dict[str, Any] = {"context_length": self.engine.context_length,
                               "parallel": self.engine.slots}
        if self.options.eval_batch_size is not None:
            out["eval_batch_size"] = self.options.eval_batch_size
        return out


def file_size(spec: ModelSpec) -> int:
    try:
        return spec.locate().stat().st_size
    except (OSError, ValueError):
        return 0


class ServedModels:
    def __init__(self, models: list[ServedModel], *,
                 catalog: Callable[[], list[ModelSpec]] | None = None,
                 loader: Loader | None = None, idle_ttl: float | None = None,
                 memory_budget: int | None = None) -> None:
        if not models and catalog is None:
            raise ValueError("a server needs at least one model")
        self._models = list(models)
        self._catalog = catalog or (lambda: [])
        self._loader = loader
        self.idle_ttl = idle_ttl
        self.memory_budget = memory_budget
        self._loading: dict[str, asyncio.Future[ServedModel]] = {}  # single flight
        self._reaper: asyncio.Task[None] | None = None

    def __iter__(self):
        return iter(list(self._models))

    @property
    def default(self) -> ServedModel | None:
        return self._models[0] if self._models else None

    # -- finding ------------------------------------------------------------------

    def resolve(self, requested: str | None) -> tuple[ServedModel, str]:
        """A loaded model (and the id to echo). An omitted model means the default one."""
        if not requested and self.default is not None:
            return self.default, self.default.spec.id
        for model in self._models:
            if requested in model.spec.names():
                return model, requested
        raise ModelNotFound(requested or "")

    def available(self) -> list[ModelSpec]:
        """Every model a request may name: the loaded ones, then the catalog's."""
        specs = [m.spec for m in self._models]
        ids = {s.id for s in specs}
        return specs + [s for s in self._catalog() if s.id not in ids]

    def spec(self, requested: str) -> ModelSpec:
        for spec in self.available():
            if requested in spec.names():
                return spec
        raise ModelNotFound(requested)

    def is_loaded(self, requested: str | None) -> bool:
        try:
            self.resolve(requested)
        except ModelNotFound:
            return False
        return True

    # -- loading ------------------------------------------------------------------

    async def acquire(self, requested: str | None, on_progress: Progress | None = None,
                      options: LoadOptions = LoadOptions()
                      ) -> tuple[ServedModel, str, float | None]:
        """(model, id to echo, load seconds when this call loaded it), loading the
        model just in time when it is not loaded yet."""
        try:
            model, echoed = self.resolve(requested)
        except ModelNotFound:
            if not requested or self._loader is None:
                raise
            model, seconds = await self.load(self.spec(requested), options, on_progress,
                                             jit=True)
            model.last_used = time.monotonic()
            return model, requested, seconds
        model.last_used = time.monotonic()
        return model, echoed, None

    async def load(self, spec: ModelSpec, options: LoadOptions,
                   on_progress: Progress | None = None, *, jit: bool = False
                   ) -> tuple[ServedModel, float | None]:
        """(model, seconds when this call loaded it; None when it was loaded already
        or another request's load was joined)."""
        for model in self._models:
            if model.spec.id == spec.id:
                return model, None
        pending = self._loading.get(spec.id)
        if pending is not None:
            return await asyncio.shield(pending), None
        if self._loader is None:
            raise ModelNotFound(spec.id)
        # A task of its own: a caller that leaves (cancelled) never aborts a load that
        # others may be waiting for, nor loses the engine a loading thread makes.
        task = asyncio.ensure_future(self._load(spec, options, on_progress, jit))
        self._loading[spec.id] = task
        task.add_done_callback(lambda done: (self._loading.pop(spec.id, None),
                                             done.cancelled() or done.exception()))
        model = await asyncio.shield(task)
        return model, model.load_seconds

    async def _load(self, spec: ModelSpec, options: LoadOptions, on_progress: Progress | None,
                    jit: bool) -> ServedModel:
        size = file_size(spec)
        await self._make_room(spec.id, size)
        started = time.perf_counter()
        try:
            engine = await asyncio.to_thread(self._loader, spec, options,  # type: ignore[arg-type]
                                             on_progress)
        except ParlanceError:
            raise
        except Exception as exc:
            raise EngineFailure(f"Could not load the model '{spec.id}': {exc}",
                                code="model_load_failed") from exc
        seconds = time.perf_counter() - started
        model = ServedModel(spec, engine, int(time.time()), size, jit, seconds,
                            options=options)
        self._models.append(model)
        log.info("loaded %s in %.2fs", spec.id, seconds)
        return model

    async def _make_room(self, model_id: str, size: int) -> None:
        """Unload idle models, least recently used first, until `size` fits the budget."""
        if self.memory_budget is None:
            return
        if size > self.memory_budget:
            raise Overloaded(f"The model '{model_id}' ({size} bytes) is larger than this "
                             f"server's memory budget ({self.memory_budget} bytes).")
        while sum(m.size_bytes for m in self._models) + size > self.memory_budget:
            idle = [m for m in self._models if m.engine.metrics.idle and m.size_bytes]
            if not idle:
                raise Overloaded(f"Not enough memory budget to load '{model_id}' while the "
                                 "loaded models are busy; try again shortly.",
                                 retry_after=5.0)
            await self.unload(min(idle, key=lambda m: m.last_used).spec.id)

    async def unload(self, instance_id: str) -> bool:
        for model in self._models:
            if model.spec.id == instance_id:
                self._models.remove(model)
                await model.engine.aclose()
                log.info("unloaded %s", instance_id)
                return True
        return False

    # -- idle TTL -----------------------------------------------------------------

    async def unload_idle(self, now: float | None = None) -> list[str]:
        """Unload just-in-time models idle for longer than the TTL."""
        if self.idle_ttl is None:
            return []
        now = time.monotonic() if now is None else now
        stale = [m.spec.id for m in self._models
                 if m.jit and m.engine.metrics.idle and now - m.last_used > self.idle_ttl]
        for model_id in stale:
            await self.unload(model_id)
        return stale

    def start_reaper(self) -> None:
        if self.idle_ttl is None or self._reaper is not None:
            return

        async def reap() -> None:
            while True:
                await asyncio.sleep(min(30.0, max(0.05, self.idle_ttl / 4)))  # type: ignore
                await self.unload_idle()

        self._reaper = asyncio.ensure_future(reap())

    async def aclose(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for model in list(self._models):
            await model.engine.aclose()
        self._models.clear()
