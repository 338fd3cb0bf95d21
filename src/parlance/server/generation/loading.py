"""Taking a call's model: the lease a call asks for (`call_lease`), a call that only
loads or unloads its model (`load_only`, Ollama's call without a prompt), and a
generation that first loads its cold model inside the response (`LoadingGeneration`).

`LoadingGeneration` is for dialects whose clients see model loads (LM Studio's
`model_load.*`): the stream begins at once and the load happens inside it, reporting
real progress as `ModelLoad` events, so a load failure or a refusal at start becomes
the stream's `Failed` event. Only the request that caused the load sees its progress;
one that joins another's load just waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.responses import JSONResponse, Response

from parlance.core.accumulate import Accumulator
from parlance.core.errors import ParlanceError
from parlance.core.events import Event, Failed, ModelLoad
from parlance.core.prompts import PromptInfo
from parlance.dialects.base import Call, Dialect, Served
from parlance.dialects.embedding_base import EmbedCall
from parlance.engines.base import Generation
from parlance.models.lease import ModelLease
from parlance.models.served import LoadOptions, ServedModel, ServedModels
from parlance.server.http.access_log import AccessRecord

Start = Callable[[ServedModel], Awaitable[Generation]]


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
    served = Served(name, (), load_seconds)
    return JSONResponse(dialect.render(call, served, Accumulator().result))


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
        loop = asyncio.get_running_loop()
        shown = -1.0  # llama.cpp reports every tensor: pass on steps of a percent
        progress: asyncio.Queue[float] = asyncio.Queue()

        def report(fraction: float) -> None:  # called from the loading thread
            loop.call_soon_threadsafe(progress.put_nowait, fraction)

        loading = asyncio.ensure_future(self._lease.acquire(report))
        # If our consumer leaves, the load carries on (the model stays loaded); its
        # outcome is then nobody's to report.
        loading.add_done_callback(lambda done: done.cancelled() or done.exception())
        cancelled = asyncio.ensure_future(self._cancelled.wait())
        try:
            while not loading.done():
                if cancelled.done():
                    return
                waiter = asyncio.ensure_future(progress.get())
                try:
                    await asyncio.wait({waiter, loading, cancelled},
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
                if waiter.done() and not waiter.cancelled():
                    fraction = min(1.0, waiter.result())
                    if fraction - shown >= 0.01 or (fraction == 1.0 and shown < 1.0):
                        shown = fraction
                        yield ModelLoad(self._model_id, fraction)
            model = loading.result()
        except ParlanceError as exc:
            yield Failed(exc)
            return
        finally:
            cancelled.cancel()
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
