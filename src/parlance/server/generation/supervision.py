"""Supervising a generation: what oversees it (`Watch`: the deadline, the server's drain,
the access record, a stop switch), the call once nothing can refuse it (`Started`), and
`guarded`, which makes every generation's stream end by contract whatever stops it.
The handler, WebSocket mode and background runs share these."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from starlette.requests import ClientDisconnect, Request

from parlance.core.errors import EngineFailure, ParlanceError, RequestTimeout
from parlance.core.events import Event, Failed, Usage
from parlance.dialects.base import Call, Served
from parlance.engines.base import Generation
from parlance.integrations.toolbox import Toolbox
from parlance.server.generation.conversations import Memory
from parlance.server.generation.drain import Drain, Stoppable
from parlance.server.http.access_log import AccessRecord

log = logging.getLogger("parlance.server")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Watch:
    """What oversees a request's generation: its deadline (event loop time), the
    server's drain (None: an app without one), the access record it fills in, and
    the switch its client may stop it with (a background response's cancel)."""

    deadline: float
    drain: Drain | None
    record: AccessRecord
    switch: StopSwitch | None = None


@dataclass(frozen=True, slots=True)
class Started:
    """A call whose generation runs: nothing can refuse it any more."""

    call: Call
    served: Served
    generation: Generation
    watch: Watch
    toolbox: Toolbox | None  # the request's server-side tools, closed with its stream
    memory: Memory | None  # where its conversation is kept (stateful dialects)


async def guarded(generation: Generation, watch: Watch) -> AsyncGenerator[Event, None]:
    """The generation's events, ending by contract whatever happens: past the
    deadline, when the server's drain ends its grace, when the engine raises, or
    when the engine's stream ends before its final `Usage` (a broken contract), the
    last event is a `Failed`. On the way out (normal end, failure or the consumer
    leaving) the generation is cancelled, which frees what it holds."""
    stopper = Stopper(generation, watch)
    record = watch.record
    ended = False
    failure: ParlanceError | None = None
    try:
        async for event in generation:
            if isinstance(event, Usage | Failed):
                ended = True
                stopper.settle()
            record.observe(event)
            yield event
        if not ended:
            failure = stopper.reason or EngineFailure(
                "The engine ended the stream before it finished.", code="incomplete_stream")
    except ParlanceError as exc:
        failure = exc
    except Exception as exc:
        log.exception("engine stream failed")
        failure = EngineFailure(f"The engine failed: {exc}")
    finally:
        stopper.settle()
        generation.cancel()
    if failure is not None:
        failed = Failed(failure)
        record.observe(failed)
        yield failed


class Stopper:
    """Ends one generation early and remembers why: the request deadline (one timer
    per request), the server's drain or the request's stop switch. The generation is
    cancelled, its stream then ends (the engine contract) and `guarded` reports `reason`.

    One timer instead of a timeout scope around every event keeps the per-token
    work of the event loop small; on a small CPU that work competes with decoding.
    """

    def __init__(self, generation: Generation, watch: Watch) -> None:
        self.reason: ParlanceError | None = None
        self._generation = generation
        self._settled = False
        self._overseers = [o for o in (watch.drain, watch.switch) if o is not None]
        self._handle = asyncio.get_running_loop().call_at(watch.deadline, self._expire)
        for overseer in self._overseers:
            overseer.enrol(self)

    def stop(self, reason: ParlanceError) -> None:
        if self._settled or self.reason is not None:
            return
        self.reason = reason
        self._generation.cancel()

    def _expire(self) -> None:
        self.stop(RequestTimeout())

    def settle(self) -> None:
        """The work is over (done, failed or abandoned): a late stop changes nothing."""
        if not self._settled:
            self._settled = True
            self._handle.cancel()
            for overseer in self._overseers:
                overseer.leave(self)


class StopSwitch:
    """Stops the generation enrolled in it (`Stopper`), now or as soon as it enrols:
    a background response's cancel endpoint, which may come before the generation's
    stream is being read."""

    def __init__(self) -> None:
        self.reason: ParlanceError | None = None
        self._running: set[Stoppable] = set()

    def stop(self, reason: ParlanceError) -> None:
        self.reason = reason
        for work in list(self._running):
            work.stop(reason)

    def enrol(self, work: Stoppable) -> None:
        if self.reason is not None:
            work.stop(self.reason)
        else:
            self._running.add(work)

    def leave(self, work: Stoppable) -> None:
        self._running.discard(work)


async def race_disconnect(request: Request, work: Any) -> bool:
    """Run `work`; True if the client disconnected first (work is then cancelled)."""
    left = False
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            nonlocal left
            while (await request.receive())["type"] != "http.disconnect":
                pass
            left = True
            group.cancel_scope.cancel()

        group.start_soon(watch)
        await work
        group.cancel_scope.cancel()
    return left




async def unless_left(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result, awaited in this task, unless the client leaves first: `work` is
    then cancelled (an upstream it waits on sees its connection closed) and
    `ClientDisconnect` raised, which the app answers 499."""
    task = asyncio.current_task()
    assert task is not None
    left = False

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    def leave(listener: asyncio.Future[None]) -> None:
        nonlocal left
        if not listener.cancelled() and listener.exception() is None:
            left = True
            task.cancel()

    listener = asyncio.ensure_future(disconnected())
    listener.add_done_callback(leave)
    try:
        return await work
    except asyncio.CancelledError:
        if not left or task.cancelling() > 1:
            raise  # cancelled from outside (too): that goes on
        task.uncancel()
        raise ClientDisconnect() from None
    finally:
        listener.remove_done_callback(leave)
        listener.cancel()
