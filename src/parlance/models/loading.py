"""Loading models on demand: planned first (`load_plan`: settings in range, memory
estimated from the GGUF header, refused before any work when no memory could take
it), single-flight (concurrent requests for a cold model share one load, and only the
first one is told it caused it), within the memory budget and the machine's free
memory by unloading the least recently used idle models first."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from parlance.core.errors import (
    EngineFailure,
    ModelNotFound,
    ModelUnusable,
    Overloaded,
    ParlanceError,
)
from parlance.engines.base import Engine
from parlance.models.load_plan import (
    LoadDefaults,
    LoadOptions,
    LoadPlan,
    check_fits,
    plan_load,
    usable_memory,
)
from parlance.models.loaded import Loaded, ServedModel
from parlance.models.names import Names
from parlance.models.registry import ModelSpec

log = logging.getLogger("parlance.models")

LoadProgress = Callable[[float], None]  # called from the loading thread
Loader = Callable[[ModelSpec, LoadPlan, LoadProgress | None], Engine]  # blocking

CHOSEN_NOTHING = LoadOptions()  # a call that asks for no load settings


class Loading:
    def __init__(self, loaded: Loaded, names: Names, loader: Loader | None, *,
                 memory_budget: int | None, defaults: LoadDefaults,
                 free_memory: Callable[[], int | None]) -> None:
        self._loaded = loaded
        self._names = names
        self._loader = loader
        self.memory_budget = memory_budget
        self.defaults = defaults
        self._free_memory = free_memory
        self._pending: dict[str, asyncio.Future[ServedModel]] = {}  # model id -> its load

    # -- planning -----------------------------------------------------------------

    def plan(self, spec: ModelSpec, options: LoadOptions) -> LoadPlan:
        """Refuse now (InvalidRequest naming the parameter) a load no memory could take:
        settings out of range, more than the budget, or more than the machine has free
        even after unloading every idle model."""
        plan = plan_load(spec, options, self.defaults)
        freeable = sum(m.size_bytes for m in self._loaded.local if not m.busy)
        check_fits(plan, spec.id, budget=self.memory_budget, available=self._free_memory(),
                   freeable=freeable)
        return plan

    def check(self, requested: str | None, options: LoadOptions) -> None:
        """Refuse, before a response starts, load options no load could honour; for a
        model not loaded yet, also a load that could not fit (ModelNotFound: no such model)."""
        names = self._names
        if names.is_loaded(requested):
            if options != CHOSEN_NOTHING:  # a loaded model ignores them, but not absurd ones
                plan_load(names.resolve(requested)[0].spec, options, self.defaults)
            return
        self.plan(names.spec(requested or ""), options)

    # -- loading ------------------------------------------------------------------

    async def acquire(self, requested: str | None, on_progress: LoadProgress | None = None,
                      options: LoadOptions = CHOSEN_NOTHING
                      ) -> tuple[ServedModel, str, float | None]:
        """(model, id to echo, load seconds when this call loaded it), loading the
        model just in time when it is not loaded yet."""
        names = self._names
        try:
            model, echoed = names.resolve(requested)
        except ModelNotFound:
            if self._loader is None:
                raise
            spec = names.spec(requested)
            default = names.default_spec
            pinned = default is not None and spec.id == default.id
            model, seconds = await self.load(spec, options, on_progress, jit=not pinned)
            model.last_used = time.monotonic()
            return model, requested or spec.id, seconds
        model.last_used = time.monotonic()
        return model, echoed, None

    async def load(self, spec: ModelSpec, options: LoadOptions,
                   on_progress: LoadProgress | None = None, *, jit: bool = False
                   ) -> tuple[ServedModel, float | None]:
        """(model, seconds when this call loaded it; None when it was loaded already
        or another request's load was joined)."""
        model = self._loaded.find(spec.id)
        if model is not None:
            return model, None
        pending = self._pending.get(spec.id)
        if pending is not None:
            return await asyncio.shield(pending), None
        if self._loader is None:
            raise ModelNotFound(spec.id)
        # A task of its own: a caller that leaves (cancelled) never aborts a load that
        # others may be waiting for, nor loses the engine a loading thread makes.
        task = asyncio.ensure_future(self._load(spec, options, on_progress, jit))
        self._pending[spec.id] = task
        task.add_done_callback(lambda done: (self._pending.pop(spec.id, None),
                                             done.cancelled() or done.exception()))
        model = await asyncio.shield(task)
        return model, model.load_seconds

    async def _load(self, spec: ModelSpec, options: LoadOptions, on_progress: LoadProgress | None,
                    jit: bool) -> ServedModel:
        plan = self.plan(spec, options)
        size = plan.memory.total
        await self._make_room(spec.id, plan)
        started = time.perf_counter()
        try:
            engine = await asyncio.to_thread(self._loader, spec, plan,  # type: ignore[arg-type]
                                             on_progress)
        except ModelUnusable as exc:
            raise ModelUnusable(f"The model '{spec.id}' cannot be used: {exc.message}",
                                param="model", code=exc.code) from None
        except ParlanceError:
            raise
        except Exception as exc:  # its text may name server paths: the log has it
            log.exception("could not load the model %s", spec.id)
            raise EngineFailure(f"Could not load the model '{spec.id}' "
                                f"({type(exc).__name__}; the server log has the details).",
                                code="model_load_failed") from exc
        seconds = time.perf_counter() - started
        model = ServedModel(spec, engine, int(time.time()), size, jit, seconds,
                            options=options)
        self._loaded.local.append(model)
        log.info("loaded %s in %.2fs", spec.id, seconds)
        return model

    async def _make_room(self, model_id: str, plan: LoadPlan) -> None:
        """Unload idle models, least recently used first, until the load fits the budget
        beside the others and the machine's free memory."""
        size = plan.memory.total
        local = self._loaded.local
        while True:
            over_budget = (self.memory_budget is not None and
                           sum(m.size_bytes for m in local) + size > self.memory_budget)
            free = self._free_memory()
            short = free is not None and size > usable_memory(free)
            if not over_budget and not short:
                return
            idle = [m for m in local if not m.busy and m.size_bytes]
            if not idle:
                if short:  # nothing left to unload: the load itself is too big
                    check_fits(plan, model_id, budget=None, available=free)
                raise Overloaded(f"Not enough memory budget to load '{model_id}' while the "
                                 "loaded models are busy; try again shortly.",
                                 retry_after=5.0)
            await self.unload(min(idle, key=lambda m: m.last_used).spec.id)

    async def unload(self, instance_id: str) -> bool:
        for model in self._loaded.local:
            if model.spec.id == instance_id:
                self._loaded.local.remove(model)
                await model.engine.aclose()
                log.info("unloaded %s", instance_id)
                return True
        return False
