"""The cyclic garbage collector paused while a large body is parsed on a worker thread.

Parsing 32 MB of messages allocates about a million objects; the collector, which
runs whenever allocations outpace deallocations, then makes several full passes over
the whole heap, each holding the GIL, during which the event loop cannot answer anyone
(bench/health_under_load.py measures /health while such a body is parsed). Paused, it
makes at most one pass afterwards, when the refused body is already freed (by
reference counting, which is never paused). Concurrent parses share one pause: the
collector resumes when the last one ends, as it was before the first.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_parsing = 0
_was_enabled = True


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    global _parsing, _was_enabled
    with _lock:
        if _parsing == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _parsing += 1
    try:
        yield
    finally:
        with _lock:
            _parsing -= 1
            if _parsing == 0 and _was_enabled:
                gc.enable()
