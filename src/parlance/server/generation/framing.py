"""Frames to bytes: SSE (`event:` optional, `data:` always) or NDJSON lines."""

from __future__ import annotations

import json
import time

from parlance.dialects.base import Frame, Framing

MEDIA_TYPES = {"sse": "text/event-stream; charset=utf-8", "ndjson": "application/x-ndjson"}


# Built once: json.dumps with options builds a new encoder on every call (per frame).
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(data: object) -> str:
    return _ENCODER.encode(data)


def encode(frame: Frame, framing: Framing) -> bytes:
    payload = frame.data if isinstance(frame.data, str) else dumps(frame.data)
    if framing == "ndjson":
        return (payload + "\n").encode()
    head = f"event: {frame.event}\n" if frame.event else ""
    return f"{head}data: {payload}\n\n".encode()


def keepalive(framing: Framing) -> bytes | None:
    """An SSE comment line clients ignore; NDJSON has no comments, so none."""
    if framing == "ndjson":
        return None
    return f": {time.time():.3f}\n\n".encode()
