"""One call's use of a served model: refuse what no load could honour, acquire the model
(loading it just in time), apply the call's `keep_alive`, and release it when the call
ends so that its idle time (the TTL, the keep_alive) starts then.

Every kind of call takes its model this way (generation, a load-only call, embeddings,
token counting), so a model's lifetime does not depend on which endpoint used it last.
Built only on `ServedModels`' public methods.
"""

from __future__ import annotations

from time import perf_counter
from types import TracebackType

from parlance.models.served import LoadOptions, LoadProgress, ServedModel, ServedModels

_NO_OPTIONS = LoadOptions()


class ModelLease:
    """`async with ModelLease(...) as lease:` for a call that ends where it starts;
    a stream, whose lease outlives its handler, calls `check`, `acquire` and, once the
    stream is over, `release` (idempotent) itself."""

    def __init__(self, models: ServedModels, requested: str | None,
                 options: LoadOptions = _NO_OPTIONS, keep_alive: float | None = None) -> None:
        self.models = models
        self.requested = requested
        self.options = options
        self.keep_alive = keep_alive  # seconds once idle; None: the server's rule
        self.name = requested or ""  # the id to echo (known once acquired)
        self.load_seconds: float | None = None  # the load this call waited for
        self.ready_seconds = 0.0  # how long it waited for the model: a load, or a look-up
        self._model: ServedModel | None = None
        self._released = False

    @property
    def model(self) -> ServedModel:
        """The model acquired."""
        if self._model is None:
            raise RuntimeError("the lease holds no model before acquire()")
        return self._model

    def check(self, *, loading_later: bool = False) -> None:
        """Refuse now (before a response starts) load options no load could honour, and,
        when the model will be loaded later (inside a response), a load that cannot fit
        or a model that does not exist. A load made in `acquire` refuses by itself."""
        if loading_later or self.options != _NO_OPTIONS:
            self.models.check(self.requested, self.options)

    async def acquire(self, progress: LoadProgress | None = None) -> ServedModel:
        """The model, loaded just in time if need be, held until `release` (never
        unloaded under the call, whatever its keep_alive); the call's keep_alive applies
        once it is idle."""
        asked = perf_counter()
        model, name, seconds = await self.models.acquire(self.requested, progress,
                                                         self.options)
        self.ready_seconds = perf_counter() - asked
        self.models.keep(model, self.keep_alive)
        self._model, self.name, self.load_seconds = model, name, seconds
        if not self._released:  # (a call whose stream ended while its model loaded: no)
            self.models.hold(model)
        return model

    def release(self) -> None:
        """The call is over: the model's idle time starts now. Once only; a lease never
        acquired (a refused call, a load still under way) releases nothing."""
        if self._released:
            return
        self._released = True
        if self._model is not None:
            self.models.release(self._model)

    async def __aenter__(self) -> ModelLease:
        self.check()
        await self.acquire()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        self.release()
