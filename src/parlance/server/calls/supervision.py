"""Supervising a call, whatever its kind: a generation (streamed or answered at once,
over HTTP or a WebSocket, in the foreground or in the background), an embedding, a
token count. One `Supervisor` per call; the handler, WebSocket mode, background runs,
the embeddings endpoint and token counting share it.

The words, used in this sense throughout `server/`:
- a call's work is *stopped* early with a reason (a `ParlanceError`), which its answer
  then reports by its API's contract: the request deadline passed (`RequestTimeout`),
  the server's drain ended its grace (`ServerShuttingDown`), or the call's
  `StopSwitch` was thrown (a background response's cancel: `Cancelled`);
- the drain and a stop switch *oversee* calls: a call enrols with them while its work
  runs and leaves them when it *ends*; a stop after the end changes nothing;
- a client that *leaves* (disconnects) is no stop: nobody is there to be told a
  reason, the work is abandoned (`streaming.until_disconnect` is the one listener).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.requests import ClientDisconnect
from starlette.types import Receive

from parlance.core.errors import EngineFailure, ParlanceError, RequestTimeout
from parlance.core.events import Event, Failed, Usage
from parlance.dialects.base import Call, CallFacts
from parlance.engines.base import Generation
from parlance.integrations.toolbox import Toolbox
from parlance.models.lease import ModelLease
from parlance.server.calls.conversations import Conversations
from parlance.server.calls.drain import Drain, Stoppable
from parlance.server.calls.streaming import until_disconnect
from parlance.server.http.access_log import AccessRecord

log = logging.getLogger("parlance.server")

T = TypeVar("T")


class Supervisor:
    """One call's supervision: its deadline (event loop time), the server's drain (None:
    an app without one), the switch its client may stop it with, and the access record
    it fills in. While the work runs it is enrolled with the drain and the switch, and
    one timer waits for the deadline; the first stop's reason is the one reported.

    One timer instead of a timeout scope around every event keeps the per-token work of
    the event loop small; on a small CPU that work competes with decoding.
    """

    def __init__(self, deadline: float | None, drain: Drain | None, record: AccessRecord,
                 switch: StopSwitch | None = None) -> None:
        self.deadline = deadline  # None: none (a pull: its download has a limit of its own)
        self.drain = drain
        self.record = record
        self.switch = switch
        self.reason: ParlanceError | None = None
        self._halt: Callable[[], object] | None = None  # what stopping the running work does
        self._timer: asyncio.TimerHandle | None = None
        self._ended = False

    @classmethod
    def for_call(cls, app: Any, record: AccessRecord, timeout: float | None) -> Supervisor:
        """A call arriving now: its deadline `timeout` seconds away (None: no deadline),
        the app's drain."""
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        return cls(deadline, getattr(app.state, "drain", None), record)

    def stop(self, reason: ParlanceError) -> None:
        """Stop the work (`Stoppable`): the first reason wins, and once the work has
        ended nothing changes."""
        if self._ended or self.reason is not None:
            return
        self.reason = reason
        if self._halt is not None:
            self._halt()

    def end(self) -> None:
        """The work is over (done, failed or abandoned): leave the overseers."""
        if self._ended:
            return
        self._ended = True
        if self._timer is not None:
            self._timer.cancel()
        for overseer in self._overseers():
            overseer.leave(self)

    async def events(self, generation: Generation) -> AsyncGenerator[Event, None]:
        """The generation's events, ending by contract whatever happens: when it is
        stopped, when the engine raises, or when the engine's stream ends before its
        final `Usage` (a broken contract), the last event is a `Failed`. On the way out
        (normal end, failure or the consumer leaving) the generation is cancelled, which
        frees what it holds."""
        record = self.record
        ended = False
        failure: ParlanceError | None = None
        try:
            with self._running(generation.cancel):
                async for event in generation:
                    if isinstance(event, Usage | Failed):
                        ended = True
                        self.end()
                    record.observe(event)
                    yield event
            if not ended:
                failure = self.reason or EngineFailure(
                    "The engine ended the stream before it finished.",
                    code="incomplete_stream")
        except ParlanceError as exc:
            failure = exc
        except Exception as exc:
            log.exception("engine stream failed")
            failure = EngineFailure(f"The engine failed: {exc}")
        finally:
            generation.cancel()
        if failure is not None:
            failed = Failed(failure)
            record.observe(failed)
            yield failed

    async def by_deadline(self, work: Awaitable[T]) -> T:
        """`work` (starting the call's generation) bounded by the call's deadline, before
        anything else watches it: an upstream that never answers holds nobody past it."""
        timer = asyncio.timeout_at(self.deadline)
        try:
            async with timer:
                return await work
        except TimeoutError:
            if not timer.expired():
                raise
            raise RequestTimeout() from None

    async def answer(self, receive: Receive, work: Awaitable[T]) -> T:
        """The result of work answered at once (embeddings, a token count): a stop
        cancels it and raises the reason; a client that leaves abandons it
        (`ClientDisconnect`, which the app answers 499)."""
        return await self._awaited(receive, work, stoppable=True)

    async def unless_left(self, receive: Receive, work: Awaitable[T]) -> T:
        """The result of `work` (which stops itself: a generation's `events`), unless
        the client leaves first: then `work` is cancelled and `ClientDisconnect` raised."""
        return await self._awaited(receive, work, stoppable=False)

    async def _awaited(self, receive: Receive, work: Awaitable[T], *, stoppable: bool) -> T:
        """`work` awaited in this very task (no task of its own: it starts at once, as
        if awaited plainly), cancelled when the client leaves and, if `stoppable`, when
        the call is stopped; those cancellations come out as `ClientDisconnect` and the
        stop's reason, any other one as itself."""
        task = asyncio.current_task()
        assert task is not None
        ours = 0  # the cancellations asked for here
        left = False

        def cancel() -> None:
            nonlocal ours
            ours += 1
            task.cancel()

        def leave(listener: asyncio.Future[None]) -> None:
            nonlocal left
            if not listener.cancelled():
                listener.exception()  # looked at, so never logged as not retrieved
                left = True
                cancel()

        listener = asyncio.ensure_future(until_disconnect(receive))
        listener.add_done_callback(leave)
        try:
            if stoppable:
                with self._running(cancel):
                    return await work
            return await work
        except asyncio.CancelledError:
            if not ours or task.cancelling() > ours:
                raise  # cancelled from outside (too): that cancellation goes on
            if left:
                raise ClientDisconnect() from None
            assert self.reason is not None
            raise self.reason from None
        finally:
            listener.remove_done_callback(leave)
            listener.cancel()
            for _ in range(ours):  # answered here, or absorbed by the work
                task.uncancel()

    @contextlib.contextmanager
    def overseeing(self) -> Iterator[asyncio.Event]:
        """Work that ends itself when told, neither a generation nor awaited at once (a
        pull's progress stream, whose transport watches the client): overseen while
        the block runs; the event is set when it is stopped (`reason` says why)."""
        stopped = asyncio.Event()
        with self._running(stopped.set):
            yield stopped

    @contextlib.contextmanager
    def _running(self, halt: Callable[[], object]) -> Iterator[None]:
        """While the work runs, `halt` stops it: the deadline's timer is set and the
        overseers know the call (one whose grace is already over, or whose switch
        was thrown before, stops it at once)."""
        self._halt = halt
        if self.deadline is not None:
            self._timer = asyncio.get_running_loop().call_at(self.deadline, self._expire)
        for overseer in self._overseers():
            overseer.enrol(self)
        try:
            yield
        finally:
            self.end()

    def _expire(self) -> None:
        self.stop(RequestTimeout())

    def _overseers(self) -> tuple[Drain | StopSwitch, ...]:
        return tuple(o for o in (self.drain, self.switch) if o is not None)


class StopSwitch:
    """A call's own stop: a background response's cancel endpoint, which may come
    before the call's work has begun (it is then stopped as soon as it enrols)."""

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


@dataclass(frozen=True, slots=True)
class Started:
    """A call whose generation runs: nothing can refuse it any more."""

    call: Call
    served: CallFacts
    generation: Generation
    supervisor: Supervisor
    lease: ModelLease  # the model it runs on, released when the call ends
    toolbox: Toolbox | None  # the request's server-side tools, closed with its stream
    conversations: Conversations | None  # where it is kept (stateful dialects)

    async def close(self) -> None:
        """The call is over: its tool servers are closed and its model released."""
        if self.toolbox is not None:
            await self.toolbox.aclose()
        self.lease.release()
