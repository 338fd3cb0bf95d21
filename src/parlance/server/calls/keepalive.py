"""What keeps a silent stream alive, for both transports (an HTTP stream in
`streaming.py`, a WebSocket call in `socket_mode.py`): one timer per stream, told of
every frame the transport sends, that has something sent whenever nothing went out
for the keepalive interval; and the stream's own progress frame, where its encoder has
one (`dialects.base.ShowsProgress`: clients whose idle timer counts only events
would otherwise give up during a long prompt)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from parlance.dialects.base import Encoder, Frame, ShowsProgress

# What an idle stream may send now: its progress frame (None: none now)
IdleFrame = Callable[[], Frame | None]


def progress_of(encoder: Encoder) -> IdleFrame | None:
    """The encoder's progress frames, where its stream has them."""
    return encoder.idle if isinstance(encoder, ShowsProgress) else None


class Keepalive:
    """One stream's idle timer: the transport calls `sent()` for each frame, and `run`
    (a task of the stream's, cancelled with it) calls `fill()` whenever nothing went out
    for `interval` seconds, counting that as sent too."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last_sent = time.monotonic()

    def sent(self) -> None:
        self._last_sent = time.monotonic()

    async def run(self, fill: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(max(0.0, self._last_sent + self.interval - time.monotonic()))
            if time.monotonic() - self._last_sent >= self.interval:
                self._last_sent = time.monotonic()
                await fill()
