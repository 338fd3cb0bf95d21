"""Server-sent events from bytes as they arrive: the `data` of each event.

Upstream streams are one `data:` line per event; multi-line data is joined with
newlines as the SSE standard says. Comments (`: ping`) and other fields are dropped.

Split incrementally, in the connection's read callback: a read without a line break
is only appended (each byte is searched and copied a bounded number of times, however
the server cuts its stream), and what one event holds (its data, and the line still
open) is bounded by `max_event_bytes`. A server that goes past it fails that stream
(`StreamError`) instead of growing the gateway's memory and its event loop's work.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from parlance.core.errors import UpstreamFailure
from parlance.engines.upstream.chunks import StreamError

DONE = b"[DONE]"  # OpenAI's end of stream (a JSON payload is never bytes)
# Real events are a token's delta, or a whole tool call's arguments (a few hundred KB at
# most); 8 MiB leaves room for those and for a prompt's logprobs echoed in one event.
MAX_EVENT_BYTES = 8 * 2**20


class SseSplitter:
    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._max = max_event_bytes
        self._open: list[bytes] = []  # the line not yet ended, as the reads brought it
        self._open_bytes = 0
        self._data: list[bytes] = []  # the data lines of the event not yet ended
        self._held = 0  # their bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of every event `chunk` completes."""
        end = chunk.rfind(b"\n")
        if end < 0:
            if chunk:
                self._open.append(chunk)
                self._open_bytes += len(chunk)
                self._check(self._open_bytes)
            return []
        if self._open:
            lines = b"".join([*self._open, chunk[:end]]).split(b"\n")
        else:
            lines = chunk[:end].split(b"\n")
        tail = chunk[end + 1:]
        self._open, self._open_bytes = ([tail], len(tail)) if tail else ([], 0)
        out: list[bytes] = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    out.append(self._data[0] if len(self._data) == 1
                               else b"\n".join(self._data))
                    self._data, self._held = [], 0
            elif line.startswith(b"data:"):
                value = line[5:]
                value = value[1:] if value.startswith(b" ") else value
                self._check(len(value))
                self._data.append(value)
                self._held += len(value)
        self._check(self._open_bytes)
        return out

    def end(self) -> list[bytes]:
        """The event the stream ended inside (a server that closed without the blank
        line after its last event)."""
        out = self.feed(b"\n\n") if self._open or self._data else []
        self._open, self._open_bytes = [], 0
        return out

    def _check(self, size: int) -> None:
        """`size` more bytes for the current event (on top of its data so far)."""
        if self._held + size > self._max:
            raise StreamError(too_large(
                f"The upstream server sent an event larger than {self._max} bytes"))


def too_large(what: str) -> UpstreamFailure:
    """An upstream's event (or a whole answer that is one: embeddings) past the bound
    (502): ended, not read on into the gateway's memory."""
    return UpstreamFailure(f"{what} (parlance serve --upstream-max-event-mb); it was not "
                           "read further.", code="upstream_event_too_large")


def payloads(datas: Iterable[bytes]) -> Iterator[Any]:
    """Each event's data parsed as JSON, `DONE` for the end marker; data that is not
    JSON (a server's stray line) is skipped."""
    for data in datas:
        if data == DONE:
            yield DONE
            continue
        try:
            yield json.loads(data)
        except ValueError:
            continue
