"""Work that uses the model on threads other than the scheduler's (preparing requests:
templates, tokens, grammars). It is counted so that closing the engine waits for it:
freeing the model under a thread that is tokenizing would crash the process."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from parlance.core.errors import EngineFailure

T = TypeVar("T")


class InFlight:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running = 0
        self._closed = False

    def run(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`work(*args, **kwargs)`, counted (on whatever thread calls this)."""
        with self._changed:
            if self._closed:
                raise EngineFailure("The engine is shutting down.")
            self._running += 1
        try:
            return work(*args, **kwargs)
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    def close(self, timeout: float = 30.0) -> bool:
        """Refuse new work; True once none is running (False if some still is after
        `timeout` seconds: the model must then be left alone)."""
        with self._changed:
            self._closed = True
            return self._changed.wait_for(lambda: self._running == 0, timeout)
