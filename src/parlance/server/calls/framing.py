"""Frames to bytes: SSE (`event:` optional, `data:` always), NDJSON lines, or the
pieces of one JSON document (written as they are)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from parlance.dialects.base import Frame, Framing

# Built once: json.dumps with options builds a new encoder on every call (per frame).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(data: object) -> str:
    return _ENCODER.encode(data)


def encode(frame: Frame, framing: Framing) -> bytes:
    payload = frame.data if isinstance(frame.data, str) else dumps(frame.data)
    if framing == "ndjson":
        return (payload + "\n").encode()
    if framing == "json":
        return payload.encode()
    head = f"event: {frame.event}\n" if frame.event else ""
    return f"{head}data: {payload}\n\n".encode()


def keepalive(framing: Framing, ping: Frame | None = None,
              idle: Callable[[], Frame | None] | None = None) -> Callable[[], bytes] | None:
    """What an idle stream sends, made for each ping: the dialect's own ping frame, else
    the stream's own progress frame where it has one now (`idle`), else an SSE comment
    line (clients ignore it) stamped with the time it is sent; NDJSON has no comments,
    so nothing; a JSON document a line break (whitespace between its values)."""
    if ping is not None:
        frame = encode(ping, framing)
        return lambda: frame
    if framing == "ndjson":
        return None
    if framing == "json":
        return lambda: b"\n"

    def comment() -> bytes:
        return f": {time.time():.3f}\n\n".encode()

    if idle is None:
        return comment
    return lambda: encode(progress, framing) if (progress := idle()) is not None else comment()
