"""What an idle stream sends (`server/calls/framing.py::keepalive`): an SSE comment
stamped with each ping's own time, a dialect's own ping frame as it is, and nothing
for NDJSON (Ollama), which has no comments."""

from __future__ import annotations

from parlance.dialects.anthropic.stream import PING
from parlance.dialects.base import Frame
from parlance.server.calls import framing
from parlance.server.calls.framing import encode, keepalive


def test_each_sse_comment_ping_is_stamped_with_its_own_time(monkeypatch):
    times = iter([1700000000.0, 1700000012.25])
    monkeypatch.setattr(framing.time, "time", lambda: next(times))
    ping = keepalive("sse")
    assert ping is not None
    assert ping() == b": 1700000000.000\n\n"
    assert ping() == b": 1700000012.250\n\n"


def test_a_dialects_own_ping_is_sent_as_its_frame():
    ping = keepalive("sse", PING)
    assert ping is not None and ping() == ping() == encode(PING, "sse")
    assert ping().startswith(b"event: ping\n")


def test_ndjson_streams_send_no_ping():
    assert keepalive("ndjson") is None


def test_a_streams_own_progress_frame_goes_where_it_has_one_else_a_comment():
    progress = [Frame({"choices": []}), None]
    ping = keepalive("sse", idle=lambda: progress.pop(0))
    assert ping is not None
    assert ping() == encode(Frame({"choices": []}), "sse")
    assert ping().startswith(b": ")
    assert keepalive("ndjson", idle=lambda: Frame({})) is None
