"""Reading SSE bodies in tests."""

from __future__ import annotations

import json
from typing import Any


def sse_data(body: str) -> list[Any]:
    """The `data:` payloads of an SSE body, JSON-decoded except for `[DONE]`."""
    out: list[Any] = []
    for block in body.split("\n\n"):
        lines = [line for line in block.split("\n") if line.startswith("data: ")]
        if not lines:
            continue
        payload = "\n".join(line[len("data: "):] for line in lines)
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out
