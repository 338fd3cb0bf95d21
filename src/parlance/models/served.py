"""`ServedModels`: every model this server process serves, as the server sees them.
A facade over one concept per module: which model a name means (`names.py`),
planning and loading on demand (`loading.py`), how long an idle model stays
(`lifetime.py`), all looking at the same `Loaded` list (`loaded.py`).

"Served" means models: `ServedModel` is one model with a running engine, `ServedModels`
all of them. (What one call's handler tells its dialect is `dialects.base.CallFacts`.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from parlance.models.headers import file_size
from parlance.models.lifetime import Lifetime
from parlance.models.load_plan import LoadDefaults, LoadOptions, LoadPlan
from parlance.models.loaded import Loaded, ServedModel, Upstreams
from parlance.models.loading import CHOSEN_NOTHING, Loader, Loading, LoadProgress
from parlance.models.memory_estimate import available_memory
from parlance.models.names import Names
from parlance.models.registry import ModelSpec

__all__ = ["LoadDefaults", "LoadOptions", "LoadPlan", "Loader", "LoadProgress", "ServedModel",
           "ServedModels", "Upstreams", "file_size"]

_SERVER_DEFAULTS = LoadDefaults()


class ServedModels:
    """The models loaded now, each with its engine, those upstream servers serve, and
    those the catalog offers to load on demand (just in time)."""

    def __init__(self, models: list[ServedModel], *,
                 catalog: Callable[[], list[ModelSpec]] | None = None,
                 loader: Loader | None = None, idle_ttl: float | None = None,
                 memory_budget: int | None = None, defaults: LoadDefaults = _SERVER_DEFAULTS,
                 free_memory: Callable[[], int | None] = available_memory,
                 upstreams: Upstreams | None = None) -> None:
        if not models and catalog is None and upstreams is None:
            raise ValueError("a server needs at least one model")
        self._loaded = Loaded(models, upstreams)
        self._names = Names(self._loaded, models[0].spec if models else None,
                            catalog or (lambda: []))
        self._loading = Loading(self._loaded, self._names, loader,
                                memory_budget=memory_budget, defaults=defaults,
                                free_memory=free_memory)
        self._lifetime = Lifetime(self._loaded, self._names, self._loading.unload, idle_ttl)

    def __iter__(self) -> Iterator[ServedModel]:
        return iter(self._loaded)

    @property
    def upstreams(self) -> Upstreams | None:
        """Models upstream servers serve (models/upstream.py)."""
        return self._loaded.upstreams

    @property
    def idle_ttl(self) -> float | None:
        return self._lifetime.idle_ttl

    @property
    def memory_budget(self) -> int | None:
        return self._loading.memory_budget

    @property
    def defaults(self) -> LoadDefaults:
        return self._loading.defaults

    # -- names (names.py) ---------------------------------------------------------

    @property
    def default(self) -> ServedModel | None:
        """The default model while it is loaded (a server started without one: the
        first loaded model)."""
        return self._names.default

    @property
    def default_spec(self) -> ModelSpec | None:
        """The model the server started with (loaded or not); None: started without one."""
        return self._names.default_spec

    def resolve(self, requested: str | None) -> tuple[ServedModel, str]:
        return self._names.resolve(requested)

    def is_loaded(self, requested: str | None) -> bool:
        return self._names.is_loaded(requested)

    def available(self) -> list[ModelSpec]:
        return self._names.available()

    def spec(self, requested: str | None) -> ModelSpec:
        return self._names.spec(requested)

    @property
    def copies(self) -> dict[str, str]:
        return self._names.copies

    def copy(self, source: str, destination: str) -> ModelSpec:
        return self._names.copy(source, destination)

    def forget_copy(self, name: str) -> str | None:
        return self._names.forget_copy(name)

    def forget_copies_of(self, model_id: str) -> list[str]:
        return self._names.forget_copies_of(model_id)

    def restore_copies(self, copies: dict[str, str]) -> None:
        self._names.restore_copies(copies)

    # -- planning and loading (loading.py) ----------------------------------------

    def plan(self, spec: ModelSpec, options: LoadOptions) -> LoadPlan:
        return self._loading.plan(spec, options)

    def check(self, requested: str | None, options: LoadOptions) -> None:
        self._loading.check(requested, options)

    async def acquire(self, requested: str | None, on_progress: LoadProgress | None = None,
                      options: LoadOptions = CHOSEN_NOTHING
                      ) -> tuple[ServedModel, str, float | None]:
        return await self._loading.acquire(requested, on_progress, options)

    async def load(self, spec: ModelSpec, options: LoadOptions,
                   on_progress: LoadProgress | None = None, *, jit: bool = False
                   ) -> tuple[ServedModel, float | None]:
        return await self._loading.load(spec, options, on_progress, jit=jit)

    async def unload(self, instance_id: str) -> bool:
        return await self._loading.unload(instance_id)

    # -- idle TTL and keep_alive (lifetime.py) ------------------------------------

    def ttl(self, model: ServedModel) -> float | None:
        return self._lifetime.ttl(model)

    def keep(self, model: ServedModel, seconds: float | None) -> None:
        self._lifetime.keep(model, seconds)

    def hold(self, model: ServedModel) -> None:
        self._lifetime.hold(model)

    def release(self, model: ServedModel) -> None:
        self._lifetime.release(model)

    async def expire(self, requested: str) -> None:
        await self._lifetime.expire(requested)

    async def unload_idle(self, now: float | None = None) -> list[str]:
        return await self._lifetime.unload_idle(now)

    def expires_at(self, model: ServedModel) -> float | None:
        return self._lifetime.expires_at(model)

    def start_reaper(self) -> None:
        self._lifetime.start_reaper()

    # -- the running server -------------------------------------------------------

    async def start(self) -> None:
        """The background work of a running server: the reaper, and the upstream
        replicas' first discovery (waited for) and health checks."""
        self._lifetime.start_reaper()
        if self._loaded.upstreams is not None:
            await self._loaded.upstreams.start()

    async def aclose(self) -> None:
        await self._lifetime.stop_reaper()
        await self._loaded.aclose()
