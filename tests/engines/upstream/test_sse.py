"""The upstream SSE splitter: the same events however the server cuts its stream into
reads, and a bound on what one event may hold, past which that stream fails."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parlance.core.errors import EngineFailure
from parlance.engines.upstream.chunks import StreamError
from parlance.engines.upstream.sse import MAX_EVENT_BYTES, SseSplitter

STREAM = (b": ping\r\n\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nevent: x\ndata:[DONE]\n\n"
          b"data: " + b"x" * 300 + b"\n\nretry: 5\ndata: tail")
EVENTS = [b'{"a":\n1}', b"[DONE]", b"x" * 300, b"tail"]


def split(stream: bytes, cuts: list[int], limit: int = MAX_EVENT_BYTES) -> list[bytes]:
    splitter = SseSplitter(limit)
    out, start = [], 0
    for cut in sorted(cuts):
        out += splitter.feed(stream[start:cut])
        start = cut
    return out + splitter.feed(stream[start:]) + splitter.end()


@settings(max_examples=300, deadline=None)
@given(cuts=st.lists(st.integers(0, len(STREAM)), max_size=40))
def test_any_cut_into_reads_gives_the_same_events(cuts):
    assert split(STREAM, cuts) == EVENTS


def test_byte_by_byte_gives_the_same_events():
    assert split(STREAM, list(range(len(STREAM)))) == EVENTS


def too_large(info: pytest.ExceptionInfo[StreamError]) -> None:
    error = info.value.error
    assert isinstance(error, EngineFailure) and error.code == "upstream_event_too_large"
    assert "--upstream-max-event-mb" in error.message


def test_a_line_without_end_fails_once_past_the_bound_not_at_the_end():
    """A server that never ends its line: the stream fails at the bound, however
    many reads it takes, instead of buffering what it sends for as long as it sends."""
    splitter = SseSplitter(1 << 20)
    read = b"data: " + b"x" * 65_530
    sent = 0
    with pytest.raises(StreamError) as info:
        for _ in range(1000):  # 64 MB, were nothing to stop it
            splitter.feed(read)
            sent += len(read)
    too_large(info)
    assert sent <= (1 << 20) + len(read)


@pytest.mark.parametrize("stream", [
    b"data: " + b"x" * 101 + b"\n\n",  # one data line
    b"data: " + b"x" * 60 + b"\ndata: " + b"y" * 60 + b"\n\n",  # an event of two lines
    b": " + b"c" * 200,  # a comment never ended
])
def test_an_event_over_the_bound_fails_its_stream(stream):
    with pytest.raises(StreamError) as info:
        split(stream, list(range(0, len(stream), 16)), limit=100)
    too_large(info)


def test_events_up_to_the_bound_pass_and_the_bound_is_per_event():
    stream = (b"data: " + b"x" * 100 + b"\n\n") * 3 + b": " + b"c" * 90 + b"\n\n"
    assert split(stream, [7, 50, 111], limit=100) == [b"x" * 100] * 3
