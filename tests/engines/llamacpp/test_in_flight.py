"""The engine's count of work on other threads: closing waits for it (the model must not
be freed under a thread that is tokenizing) and refuses new work."""

from __future__ import annotations

import threading

import pytest

from parlance.core.errors import EngineFailure
from parlance.engines.llamacpp.in_flight import InFlight


def test_close_waits_for_running_work_and_refuses_new_work():
    in_flight = InFlight()
    started, release = threading.Event(), threading.Event()

    def work(value: int) -> int:
        started.set()
        assert release.wait(60)
        return value * 2

    results: list[int] = []
    worker = threading.Thread(target=lambda: results.append(in_flight.run(work, 21)))
    worker.start()
    assert started.wait(60)
    assert in_flight.close(timeout=0.05) is False  # still running: leave the model alone
    with pytest.raises(EngineFailure):
        in_flight.run(work, 1)
    release.set()
    assert in_flight.close(timeout=60) is True
    worker.join(60)
    assert results == [42]


def test_a_failing_work_is_no_longer_counted():
    in_flight = InFlight()

    def broken() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError):
        in_flight.run(broken)
    assert in_flight.close(timeout=0) is True
