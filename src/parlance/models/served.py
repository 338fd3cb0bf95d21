"""The models this server process serves: those loaded now, each with its engine,
and those it may load on demand (just in time) from its catalog.

Loading is single-flight (concurrent requests for a cold model share one load,
and only the first one is told it caused it), is planned first (`load_plan`: settings
in range, memory estimated from the GGUF header), stays within the memory budget and
the machine's free memory by unloading the least recently used idle models first, and
models loaded just in time are unloaded again after an idle TTL, or any model after the
`keep_alive` the last call on it asked for (Ollama's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from parlance.core.errors import (
    EngineFailure,
    InvalidRequest,
    ModelNotFound,
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
from parlance.models.memory_estimate import available_memory
from parlance.models.registry import ModelSpec, name_problem, name_variants, named

__all__ = ["LoadDefaults", "LoadOptions", "LoadPlan", "Loader", "ServedModel", "ServedModels",
           "file_size"]

log = logging.getLogger("parlance.models")

Progress = Callable[[float], None]  # called from the loading thread


Loader = Callable[[ModelSpec, LoadPlan, Progress | None], Engine]  # blocking


class Upstreams(Protocol):
    """Models served by upstream servers (`models.upstream.UpstreamModels`)."""

    def served(self) -> list[ServedModel]: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


_BUSY_RECHECK = 0.1  # seconds between looks at a model whose time is up while it is busy
MAX_COPIES = 1000  # names given at run time (each copy rewrites the whole kept list)
_CHOSEN_NOTHING = LoadOptions()
_SERVER_DEFAULTS = LoadDefaults()


@dataclass(slots=True)
class ServedModel:
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
                 memory_budget: int | None = None, defaults: LoadDefaults = _SERVER_DEFAULTS,
                 free_memory: Callable[[], int | None] = available_memory,
                 upstreams: Upstreams | None = None) -> None:
        if not models and catalog is None and upstreams is None:
            raise ValueError("a server needs at least one model")
        self._models = list(models)
        self.upstreams = upstreams  # models upstream servers serve (models/upstream.py)
        # The model a request without `model` gets: the one the server started with,
        # loaded again on demand after an unload.
        self._default_spec = models[0].spec if models else None
        self._catalog = catalog or (lambda: [])
        self._loader = loader
        self.idle_ttl = idle_ttl
        self.memory_budget = memory_budget
        self.defaults = defaults
        self._free_memory = free_memory
        self._loading: dict[str, asyncio.Future[ServedModel]] = {}  # single flight
        # Names given at run time (Ollama's /api/copy): name -> id of the model it names.
        # They resolve like a spec's own aliases (tags included) without changing it.
        self._copies: dict[str, str] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._wake_reaper = asyncio.Event()  # an expiry may have changed

    def __iter__(self):
        return iter(list(self._models) + self._remote())

    def _remote(self) -> list[ServedModel]:
        """The upstream models, but for those a local model's id hides."""
        if self.upstreams is None:
            return []
        local = {m.spec.id for m in self._models}
        return [m for m in self.upstreams.served() if m.spec.id not in local]

    @property
    def default(self) -> ServedModel | None:
        """The default model while it is loaded (a server started without one: the
        first loaded model)."""
        if self._default_spec is None:
            return next(iter(self), None)
        return next((m for m in self._models if m.spec.id == self._default_spec.id), None)

    @property
    def default_spec(self) -> ModelSpec | None:
        """The model the server started with (loaded or not); None: started without one."""
        return self._default_spec

    # -- finding ------------------------------------------------------------------

    def resolve(self, requested: str | None) -> tuple[ServedModel, str]:
        """A loaded model (and the id to echo). An omitted model means the default one."""
        if not requested and self.default is not None:
            return self.default, self.default.spec.id
        model = named(self._models, requested, lambda m: self._with_copies(m.spec))
        if model is None:
            model = named(self._remote(), requested, lambda m: self._with_copies(m.spec))
        if model is not None and requested:
            return model, requested
        raise ModelNotFound(requested or "")

    def available(self) -> list[ModelSpec]:
        """Every model a request may name: the loaded ones, then the catalog's."""
        specs = [m.spec for m in self._models]
        if self._default_spec is not None and self.default is None:
            specs.append(self._default_spec)
        specs += [m.spec for m in self._remote()]
        ids = {s.id for s in specs}
        return specs + [s for s in self._catalog() if s.id not in ids]

    def spec(self, requested: str | None) -> ModelSpec:
        """The spec a request names; none named: the default model's."""
        if not requested and self._default_spec is not None:
            return self._default_spec
        spec = named(self.available(), requested, self._with_copies)
        if spec is not None:
            return spec
        raise ModelNotFound(requested or "")

    # -- names given at run time ----------------------------------------------------

    def _with_copies(self, spec: ModelSpec) -> ModelSpec:
        names = tuple(name for name, target in self._copies.items() if target == spec.id)
        return replace(spec, aliases=(*spec.aliases, *names)) if names else spec

    @property
    def copies(self) -> dict[str, str]:
        """Names given at run time: name -> the id of the model it names."""
        return dict(self._copies)

    def copy(self, source: str, destination: str) -> ModelSpec:
        """Give the model `source` names (id, alias, copy; any tag) one more name. A
        name that is already a copy is pointed anew; one that names a model otherwise
        is refused, so a copy never hides a configured name."""
        spec = self.spec(source)
        problem = name_problem(destination)
        if problem is not None:
            raise InvalidRequest(f"destination is invalid: {problem}", param="destination")
        variants = name_variants(destination)
        owner = next((s for s in self.available() if any(v in s.names() for v in variants)),
                     None)
        if owner is not None and owner.id != spec.id:
            raise InvalidRequest(f"destination '{destination}' already names the model "
                                 f"'{owner.id}'", param="destination")
        for variant in variants:
            self._copies.pop(variant, None)
        if owner is None:  # (a configured name of the model itself needs no copy)
            if len(self._copies) >= MAX_COPIES:
                raise InvalidRequest(f"This server keeps at most {MAX_COPIES} copied names; "
                                     "delete some first (DELETE /api/delete).",
                                     param="destination")
            self._copies[destination] = spec.id
        return spec

    def forget_copy(self, name: str) -> str | None:
        """Remove the run-time name `name` (any tag variant); the id it named, or None."""
        for variant in name_variants(name):
            if variant in self._copies:
                return self._copies.pop(variant)
        return None

    def forget_copies_of(self, model_id: str) -> list[str]:
        """Remove every run-time name of `model_id` (its file is gone)."""
        gone = [name for name, target in self._copies.items() if target == model_id]
        for name in gone:
            del self._copies[name]
        return gone

    def restore_copies(self, copies: dict[str, str]) -> None:
        """Names kept from an earlier run (see models/copies.py), as they were given."""
        self._copies.update(copies)

    def is_loaded(self, requested: str | None) -> bool:
        try:
            self.resolve(requested)
        except ModelNotFound:
            return False
        return True

    # -- planning -----------------------------------------------------------------

    def plan(self, spec: ModelSpec, options: LoadOptions) -> LoadPlan:
        """Refuse now (InvalidRequest naming the parameter) a load no memory could take:
        settings out of range, more than the budget, or more than the machine has free
        even after unloading every idle model."""
        plan = plan_load(spec, options, self.defaults)
        freeable = sum(m.size_bytes for m in self._models if m.engine.metrics.idle)
        check_fits(plan, spec.id, budget=self.memory_budget, available=self._free_memory(),
                   freeable=freeable)
        return plan

    def check(self, requested: str | None, options: LoadOptions) -> None:
        """Refuse, before a response starts, load options no load could honour; for a
        model not loaded yet, also a load that could not fit (ModelNotFound: no such model)."""
        if self.is_loaded(requested):
            if options != _CHOSEN_NOTHING:  # a loaded model ignores them, but not absurd ones
                plan_load(self.resolve(requested)[0].spec, options, self.defaults)
            return
        self.plan(self.spec(requested or ""), options)

    # -- loading ------------------------------------------------------------------

    async def acquire(self, requested: str | None, on_progress: Progress | None = None,
                      options: LoadOptions = _CHOSEN_NOTHING
                      ) -> tuple[ServedModel, str, float | None]:
        """(model, id to echo, load seconds when this call loaded it), loading the
        model just in time when it is not loaded yet."""
        try:
            model, echoed = self.resolve(requested)
        except ModelNotFound:
            if self._loader is None:
                raise
            spec = self.spec(requested)
            pinned = self._default_spec is not None and spec.id == self._default_spec.id
            model, seconds = await self.load(spec, options, on_progress, jit=not pinned)
            model.last_used = time.monotonic()
            return model, requested or spec.id, seconds
        model.last_used = time.monotonic()
        return model, echoed, None

    async def load(self, spec: ModelSpec, options: LoadOptions,
                   on_progress: Progress | None = None, *, jit: bool = False
                   ) -> tuple[ServedModel, float | None]:
        """(model, seconds when this call loaded it; None when it was loaded already
        or another request's load was joined)."""
        for model in (*self._models, *self._remote()):
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
        plan = self.plan(spec, options)
        size = plan.memory.total
        await self._make_room(spec.id, plan)
        started = time.perf_counter()
        try:
            engine = await asyncio.to_thread(self._loader, spec, plan,  # type: ignore[arg-type]
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

    async def _make_room(self, model_id: str, plan: LoadPlan) -> None:
        """Unload idle models, least recently used first, until the load fits the budget
        beside the others and the machine's free memory."""
        size = plan.memory.total
        while True:
            over_budget = (self.memory_budget is not None and
                           sum(m.size_bytes for m in self._models) + size > self.memory_budget)
            free = self._free_memory()
            short = free is not None and size > usable_memory(free)
            if not over_budget and not short:
                return
            idle = [m for m in self._models if m.engine.metrics.idle and m.size_bytes]
            if not idle:
                if short:  # nothing left to unload: the load itself is too big
                    check_fits(plan, model_id, budget=None, available=free)
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

    # -- idle TTL and keep_alive ----------------------------------------------------

    def ttl(self, model: ServedModel) -> float | None:
        """Seconds `model` may stay idle before it is unloaded; None: forever. The last
        call's keep_alive rules; without one, a model loaded just in time has the idle
        TTL and the others stay."""
        if model.keep_alive is not None:
            return None if math.isinf(model.keep_alive) else model.keep_alive
        return self.idle_ttl if model.jit else None

    def keep(self, model: ServedModel, seconds: float | None) -> None:
        """A call asks that `model` stay loaded `seconds` once idle (None: the server's
        rule), as every Ollama request sets its model's keep_alive."""
        model.keep_alive = seconds
        self._wake_reaper.set()

    def release(self, requested: str) -> None:
        """A call on the model `requested` names has ended: its idle time starts now."""
        try:
            model, _ = self.resolve(requested)
        except ModelNotFound:
            return  # unloaded meanwhile
        model.last_used = time.monotonic()
        self._wake_reaper.set()

    async def expire(self, requested: str) -> None:
        """Unload the model `requested` names now, or, while calls run on it, as soon as
        they end (Ollama's keep_alive 0 without a prompt). Not loaded: nothing to do."""
        try:
            model, _ = self.resolve(requested)
        except ModelNotFound:
            return
        model.keep_alive = 0.0
        if model.engine.metrics.idle:
            await self.unload(model.spec.id)
        else:
            self._wake_reaper.set()

    async def unload_idle(self, now: float | None = None) -> list[str]:
        """Unload the idle models whose time is up (`ttl`)."""
        now = time.monotonic() if now is None else now
        stale = [m.spec.id for m in self._models if self._expired(m, now)]
        for model_id in stale:
            await self.unload(model_id)
        return stale

    def _expired(self, model: ServedModel, now: float) -> bool:
        ttl = self.ttl(model)
        return (ttl is not None and model.engine.metrics.idle
                and (ttl == 0 or now - model.last_used > ttl))

    def _next_check(self, now: float) -> float | None:
        """Seconds until the reaper must look again: the earliest expiry, or soon when
        a model's time is up but a call still runs on it; None: nothing expires."""
        waits = []
        for model in self._models:
            ttl = self.ttl(model)
            if ttl is not None:
                left = model.last_used + ttl - now
                waits.append(left if left > 0 else _BUSY_RECHECK)
        return min(waits, default=None)

    def expires_at(self, model: ServedModel) -> float | None:
        """When (wall-clock seconds) `model` will be unloaded if nothing uses it before
        (`ttl`); None: never. A busy model is never unloaded, so its time is at least now."""
        ttl = self.ttl(model)
        if ttl is None:
            return None
        return time.time() + max(model.last_used + ttl - time.monotonic(), 0.0)

    def start_reaper(self) -> None:
        """Unload models when their time is up: the reaper sleeps until the next expiry
        and wakes early when a call changes one (keep_alive, a call ending)."""
        if self._reaper is not None:
            return

        async def reap() -> None:
            while True:
                self._wake_reaper.clear()
                await self.unload_idle()
                # (not wait_for: on 3.11 it loses a cancel that meets the wake-up)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._next_check(time.monotonic())):
                        await self._wake_reaper.wait()

        self._reaper = asyncio.ensure_future(reap())

    async def aclose(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for model in list(self._models):
            await model.engine.aclose()
        self._models.clear()
        if self.upstreams is not None:
            await self.upstreams.aclose()

    async def start(self) -> None:
        """The background work of a running server: the reaper, and the upstream
        replicas' first discovery (waited for) and health checks."""
        self.start_reaper()
        if self.upstreams is not None:
            await self.upstreams.start()
