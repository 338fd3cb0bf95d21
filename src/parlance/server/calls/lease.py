"""Taking a call's model: the lease a call asks for (`call_lease`), a call that only
loads or unloads its model (`load_only`, Ollama's call without a prompt), a
generation that first loads its cold model inside the response (`LoadingGeneration`),
and a load's progress as it runs (`ReportedLoad`, which the load endpoint's stream
shows too).

`LoadingGeneration` is for dialects whose clients see model loads (LM Studio's
`model_load.*`): the stream begins at once and the load happens inside it, reporting
real progress as `ModelLoad` events, so a load failure or a refusal at start becomes
the stream's `Failed` event. Only the request that caused the load sees its progress;
one that joins another's load just waits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

from starlette.responses import JSONResponse, Response

from parlance.core.accumulate import Accumulator
from parlance.core.errors import ParlanceError
from parlance.core.events import Event, Failed, ModelLoad
from parlance.core.prompts import PromptInfo
from parlance.dialects.base import Call, CallFacts, Dialect
from parlance.dialects.embedding_base import EmbedCall
from parlance.engines.base import Generation
from parlance.models.lease import ModelLease
from parlance.models.served import LoadOptions, LoadProgress, ServedModel, ServedModels
from parlance.server.http.access_log import AccessRecord

Start = Callable[[ServedModel], Awaitable[Generation]]
T = TypeVar("T")


def call_lease(models: ServedModels, call: Call | EmbedCall) -> ModelLease:
    """The lease a call asks for: the model it names, the context a cold one is loaded
    with, and how long it stays loaded once idle (Ollama's keep_alive)."""
    return ModelLease(models, call.request.model,
                      LoadOptions(context_length=call.context_length), call.keep_alive)


async def load_only(models: ServedModels, dialect: Dialect[Any], call: Call,
                    record: AccessRecord) -> Response:
    """Load the call's model (with keep_alive 0: unload it) and answer at once."""
    name, load_seconds = call.request.model, None
    if call.keep_alive == 0:
        models.spec(name)  # 404 for a model that does not exist at all
        await models.expire(name)
    else:
        async with call_lease(models, call) as lease:
            name, load_seconds = lease.name, lease.load_seconds
    record.model = name
    served = CallFacts(name, (), load_seconds)
    return JSONResponse(dialect.render(call, served, Accumulator().result))


class ReportedLoad(Generic[T]):
    """A load (`load(report)`) in a task of its own, so that a consumer that leaves
    never aborts it (another request may be waiting for it, and the model stays
    loaded); `fractions` are its reports from the loading thread, in steps of a
    percent (llama.cpp reports every tensor)."""

    def __init__(self, load: Callable[[LoadProgress], Awaitable[T]]) -> None:
        loop = asyncio.get_running_loop()
        self._reports: asyncio.Queue[float] = asyncio.Queue()

        def report(fraction: float) -> None:  # called from the loading thread
            loop.call_soon_threadsafe(self._reports.put_nowait, fraction)

        self.task = asyncio.ensure_future(load(report))
        # Once nobody waits for it, its outcome is nobody's to report
        self.task.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def fractions(self, stop: asyncio.Event | None = None
                        ) -> AsyncGenerator[float, None]:
        """The fraction loaded, until the load ends (then `task` has its outcome, and
        every report it made has been passed on) or `stop` is set."""
        shown = -1.0
        ends: set[asyncio.Future[Any]] = {self.task}
        if stop is not None:
            ends.add(asyncio.ensure_future(stop.wait()))
        try:
            while stop is None or not stop.is_set():
                if self._reports.empty():
                    if self.task.done():
                        return  # (its reports were queued before its end)
                    waiter = asyncio.ensure_future(self._reports.get())
                    try:
                        await asyncio.wait({waiter, *ends},
                                           return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        waiter.cancel()
                    if not waiter.done() or waiter.cancelled():
                        continue
                    fraction = waiter.result()
                else:
                    fraction = self._reports.get_nowait()
                fraction = min(1.0, fraction)
                if fraction - shown >= 0.01 or (fraction == 1.0 and shown < 1.0):
                    shown = fraction
                    yield fraction
        finally:
            for end in ends - {self.task}:
                end.cancel()


class LoadingGeneration:
    """Loads the model through the call's lease, then runs `start(model)`'s generation."""

    prompts: tuple[PromptInfo, ...] = ()

    def __init__(self, lease: ModelLease, start: Start) -> None:
        self._model_id = lease.name
        self._lease = lease
        self._start = start
        self._inner: Generation | None = None
        self._cancelled = asyncio.Event()

    def cancel(self) -> None:
        """The stream ends at once; the load itself runs on (another request may be
        waiting for it)."""
        self._cancelled.set()
        if self._inner is not None:
            self._inner.cancel()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        loading = ReportedLoad(self._lease.acquire)
        try:
            async with contextlib.aclosing(loading.fractions(self._cancelled)) as fractions:
                async for fraction in fractions:
                    yield ModelLoad(self._model_id, fraction)
            if not loading.task.done():
                return  # cancelled: the load carries on without us
            model = loading.task.result()
        except ParlanceError as exc:
            yield Failed(exc)
            return
        seconds = self._lease.load_seconds
        if seconds is not None:
            yield ModelLoad(self._model_id, 1.0, seconds)
        if self._cancelled.is_set():
            return
        try:
            self._inner = await self._start(model)
        except ParlanceError as exc:
            yield Failed(exc)
            return
        async for event in self._inner:
            yield event
