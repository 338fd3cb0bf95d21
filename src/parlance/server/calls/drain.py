"""Graceful shutdown: the server-wide drain.

When the server is told to stop, it drains: new requests are refused (503 in their
API's envelope, see `server/http/admission.py`), running calls may finish for `grace`
seconds, and then every one still running is stopped with `ServerShuttingDown`, so a
stream ends by its dialect's contract (an error frame and `[DONE]`, `response.failed`,
LM Studio's `error` and `chat.end`) and an answer not streamed (a generation, an
embedding, a token count) is a 503 in its API's envelope instead of a cut connection.

Every call's `Supervisor` (`server/calls/supervision.py`) enrols here while its
work runs; `server/runner.py` begins the drain at the start of uvicorn's shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from parlance.core.errors import ParlanceError, ServerShuttingDown

log = logging.getLogger("parlance.server")


class Stoppable(Protocol):
    def stop(self, reason: ParlanceError) -> None:
        """End the work early; its answer then reports `reason`."""


class Drain:
    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.draining = False  # new requests are refused
        self.expired = False  # the grace is over: running work is being stopped
        self._running: set[Stoppable] = set()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def running(self) -> int:
        return len(self._running)

    def begin(self) -> None:
        """Start draining (on the event loop; idempotent): refuse new requests, and stop
        the calls still running after the grace."""
        if self.draining:
            return
        self.draining = True
        log.info("draining: %d calls running, %.1fs to finish", self.running, self.grace)
        if self.grace <= 0:
            self.end_grace()
        else:
            self._timer = asyncio.get_running_loop().call_later(self.grace, self.end_grace)

    def end_grace(self) -> None:
        """The grace is over (its time is up, or a second signal came): every running
        call is stopped with `ServerShuttingDown`, and so is any that enrols later."""
        self.draining = self.expired = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._running:
            log.info("stopping %d calls still running", self.running)
        for work in list(self._running):
            work.stop(ServerShuttingDown())

    def enrol(self, work: Stoppable) -> None:
        """Running work to stop when the grace ends; stopped at once when it has."""
        if self.expired:
            work.stop(ServerShuttingDown())
        else:
            self._running.add(work)

    def leave(self, work: Stoppable) -> None:
        self._running.discard(work)
