"""Server-sent events from bytes as they arrive: the `data` of each event.

Upstream streams are one `data:` line per event; multi-line data is joined with
newlines as the SSE standard says. Comments (`: ping`) and other fields are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

DONE = b"[DONE]"  # OpenAI's end of stream (a JSON payload is never bytes)


class SseSplitter:
    def __init__(self) -> None:
        self._rest = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of every event `chunk` completes."""
        buffer = self._rest + chunk if self._rest else chunk
        lines = buffer.split(b"\n")
        self._rest = lines.pop()
        out: list[bytes] = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    out.append(self._data[0] if len(self._data) == 1
                               else b"\n".join(self._data))
                    self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
        return out

    def end(self) -> list[bytes]:
        """The event the stream ended inside (a server that closed without the blank
        line after its last event)."""
        out = self.feed(b"\n\n") if self._rest or self._data else []
        self._rest = b""
        return out


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
