"""A generation that first loads its cold model, reporting real load progress as
`ModelLoad` events, then starts and streams the generation proper.

For dialects whose clients see model loads (LM Studio's `model_load.*`): the
stream begins at once and the load happens inside it, through the call's model lease,
so a load failure or a refusal at start becomes the stream's `Failed` event. Only the
request that caused the load sees its progress; one that joins another's load just waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

from parlance.core.errors import ParlanceError
from parlance.core.events import Event, Failed, ModelLoad
from parlance.engines.base import Generation, PromptInfo
from parlance.models.lease import ModelLease
from parlance.models.served import ServedModel

Start = Callable[[ServedModel], Awaitable[Generation]]


class LoadingGeneration:
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
