"""Background responses (Responses `background: true`): the call runs in a task the
app owns instead of in its request, so it goes on when its client leaves.

A run is the generic handler's frame stream, read by its task: each frame is kept
(for clients that follow it live, `GET /v1/responses/{id}?stream=true&starting_after=N`),
and each change of status the dialect announces (queued, in progress) is stored as a
pending response, which `GET /v1/responses/{id}` polls; the end is stored by the
handler's frames as for every stream. `cancel` stops the generation with `Cancelled`
through the call's stop switch, so its stream still ends by contract (as cancelled).

Bounded: at most `MAX_RUNNING` unfinished runs (429 beyond); the frames of the last
`KEEP_FINISHED` finished ones stay for late followers (older ones are replayed from the
store). A server that stops while runs are unfinished stops them through its drain
(stored as failed); after a crash, the next start marks those still pending failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import Any

from starlette.responses import JSONResponse, Response

from parlance.core.errors import Cancelled, InvalidRequest, Overloaded
from parlance.dialects.base import DONE, Backgrounds, Call, Frame, Framing
from parlance.server.calls.framing import dumps
from parlance.server.calls.streaming import EventStreamResponse
from parlance.server.calls.supervision import Started, StopSwitch
from parlance.store.responses import ResponseStore

log = logging.getLogger("parlance.server")

MAX_RUNNING = 32
KEEP_FINISHED = 32


class BackgroundRun:
    def __init__(self, switch: StopSwitch) -> None:
        self.id: str | None = None  # known from the first status it announces
        self.frames: list[Frame] = []
        self.numbered = 0  # frames with a sequence number (all but the closing [DONE])
        self.finished = asyncio.Event()
        self.first: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._switch = switch
        self._arrival = asyncio.Event()

    def add(self, frame: Frame) -> None:
        """Kept encoded: a frame's objects may still change as the response goes on."""
        data = frame.data if isinstance(frame.data, str) else dumps(frame.data)
        self.frames.append(Frame(data, frame.event))
        if data != DONE:
            self.numbered += 1
        self._arrival.set()
        self._arrival = asyncio.Event()

    def end(self) -> None:
        self.finished.set()
        self._arrival.set()

    def follow(self, starting_after: int | None) -> AsyncGenerator[Frame, None]:
        """The run's frames after sequence number `starting_after` (all of them for
        None), then each as it comes, until the end. A frame's sequence number is its
        place in the stream; `starting_after` must be one already sent (else
        `InvalidRequest`, raised here, before any frame)."""
        if starting_after is None:
            return self._frames(0)
        return self._frames(check_cursor(starting_after, self.numbered) + 1)

    async def _frames(self, index: int) -> AsyncGenerator[Frame, None]:
        while True:
            while index < len(self.frames):
                yield self.frames[index]
                index += 1
            if self.finished.is_set():
                return
            await self._arrival.wait()

    async def cancel(self) -> None:
        """Stop the generation; done once the end is stored."""
        self._switch.stop(Cancelled())
        await self.finished.wait()


def check_cursor(starting_after: int, numbered: int) -> int:
    """`starting_after` when it names a frame of a stream of `numbered` frames so far:
    a cursor before the first or past the last would repeat frames or skip the end."""
    if not 0 <= starting_after < numbered:
        raise InvalidRequest(f"starting_after must be the sequence number of an event of "
                             f"this stream: 0 to {numbered - 1}.", param="starting_after")
    return starting_after


class BackgroundRuns:
    """The app's background runs of one dialect, by response id."""

    def __init__(self, dialect: Backgrounds[Any], framing: Framing, store: ResponseStore,
                 *, keepalive_seconds: float, kind: str) -> None:
        self.dialect = dialect
        self.framing = framing
        self.keepalive_seconds = keepalive_seconds
        self._runs: OrderedDict[str, BackgroundRun] = OrderedDict()  # unfinished first
        self._running = 0
        self._tasks: set[asyncio.Task[None]] = set()
        for cut in store.unfinished(kind):  # the server stopped before they finished
            store.put(replace(cut, response=dialect.interrupted(cut.response), pending=False))

    def takes(self, call: Call) -> bool:
        """Whether the call runs in the background (429 when too many already do)."""
        if not self.dialect.in_background(call):
            return False
        if self._running >= MAX_RUNNING:
            raise Overloaded(f"{MAX_RUNNING} background responses are running already; "
                             "retry once one has finished.", retry_after=5.0)
        return True

    def find(self, response_id: str) -> BackgroundRun | None:
        return self._runs.get(response_id)

    async def launch(self, started: Started,
                     frames: AsyncGenerator[Frame, None]) -> Response | EventStreamResponse:
        """Start the run; answer with the response as first stored, or follow it live
        (`stream: true`: a client that leaves stops following, not the run)."""
        switch = started.supervisor.switch
        assert switch is not None, "a background call is started with a stop switch"
        run = BackgroundRun(switch)
        self._running += 1
        task = asyncio.get_running_loop().create_task(self._drive(run, started, frames))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        first = await run.first
        if not started.call.stream:
            return JSONResponse(first)
        return EventStreamResponse(run.follow(None), framing=self.framing,
                                   keepalive_seconds=self.keepalive_seconds,
                                   on_close=lambda: None)

    async def _drive(self, run: BackgroundRun, started: Started,
                     frames: AsyncGenerator[Frame, None]) -> None:
        conversations = started.conversations
        try:
            async with contextlib.aclosing(frames) as stream:
                async for frame in stream:
                    snapshot = self.dialect.progress(frame)
                    if snapshot is not None:
                        if conversations is not None:
                            conversations.keep(started.call, snapshot, pending=True)
                        if run.id is None:
                            run.id = str(snapshot["id"])
                            self._runs[run.id] = run
                            run.first.set_result(json.loads(dumps(snapshot)))  # as it is now
                    run.add(frame)
        except Exception as exc:
            if run.first.done():
                log.exception("background response failed")
            else:  # raised to the request that launched it, which answers (and logs) it
                run.first.set_exception(exc)
        finally:
            self._running -= 1
            if not run.first.done():  # ended before its first status (cancelled early)
                run.first.set_exception(RuntimeError("the background run ended unstarted"))
            run.end()
            self._retire(run)

    def _retire(self, run: BackgroundRun) -> None:
        """Finished runs move to the back; beyond `KEEP_FINISHED` the oldest go."""
        if run.id is None:
            return
        self._runs.move_to_end(run.id)
        finished = [key for key, kept in self._runs.items() if kept.finished.is_set()]
        for key in finished[:max(0, len(finished) - KEEP_FINISHED)]:
            del self._runs[key]
