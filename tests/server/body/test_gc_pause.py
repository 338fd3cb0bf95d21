"""The collector pause shared by concurrent large parses: off while any runs, back to
what it was once the last ends."""

from __future__ import annotations

import gc

import pytest

from parlance.server.body.gc_pause import collector_paused


@pytest.fixture
def collector():
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_overlapping_pauses_resume_after_the_last(collector):
    gc.enable()
    first, second = collector_paused(), collector_paused()
    first.__enter__()
    second.__enter__()
    assert not gc.isenabled()
    first.__exit__(None, None, None)
    assert not gc.isenabled()  # the second parse is still running
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collector):
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_the_pause_ends_when_the_parse_fails(collector):
    gc.enable()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("bad body")
    assert gc.isenabled()
