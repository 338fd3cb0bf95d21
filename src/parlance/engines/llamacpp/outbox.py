"""Carries events from the scheduler thread to the asyncio loop, one wake-up per step.

The scheduler stages every event of a decode step and flushes once: all of a
step's deltas, for every stream, cross the thread boundary in one
`call_soon_threadsafe`. If the loop has not yet drained the previous delivery,
new events join it instead of scheduling another wake-up, so a busy loop is
never flooded with callbacks.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Protocol


class Recipient(Protocol):
    loop: asyncio.AbstractEventLoop

    def receive(self, item: object) -> None:
        """Called on the recipient's event loop."""


class Outbox:
    def __init__(self) -> None:
        self._staged: list[tuple[Recipient, object]] = []  # scheduler thread only
        self._lock = threading.Lock()
        self._pending: dict[asyncio.AbstractEventLoop, list[tuple[Recipient, object]]] = {}

    def put(self, recipient: Recipient, item: object) -> None:
        self._staged.append((recipient, item))

    def flush(self) -> None:
        if not self._staged:
            return
        staged, self._staged = self._staged, []
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Recipient, object]]] = {}
        for entry in staged:
            by_loop.setdefault(entry[0].loop, []).append(entry)
        for loop, entries in by_loop.items():
            with self._lock:
                pending = self._pending.get(loop)
                if pending is not None:
                    pending.extend(entries)
                    continue
                self._pending[loop] = entries
            try:
                loop.call_soon_threadsafe(self._deliver, loop)
            except RuntimeError:  # that loop is closed: nobody is listening any more
                with self._lock:
                    self._pending.pop(loop, None)

    def _deliver(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            entries = self._pending.pop(loop, [])
        for recipient, item in entries:
            recipient.receive(item)
