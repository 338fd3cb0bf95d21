"""The one streaming response: encodes frames in the dialect's framing (SSE or
NDJSON), writes them, pings while idle, and turns a client disconnect into
cancellation at once.

Three asyncio tasks race: the writer, the keepalive (`keepalive.py`, which WebSocket
mode shares) and the disconnect listener. When the writer ends or the client leaves,
the others are cancelled; cancelling the writer closes the frame generator, whose
`finally` cancels the engine generation. (Plain tasks, not an anyio task group: this
runs once per streamed request, and on 2 cores every µs of it is taken from decoding.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Iterable

from starlette.types import Receive, Scope, Send

from parlance.dialects.base import MEDIA_TYPES, Frame, Framing
from parlance.server.calls.framing import encode, keepalive
from parlance.server.calls.keepalive import IdleFrame, Keepalive
from parlance.server.http.access_log import BODY_SEND


class EventStreamResponse:
    def __init__(
        self,
        frames: AsyncGenerator[Frame, None] | Iterable[Frame],
        *,
        framing: Framing,
        keepalive_seconds: float,
        on_close: Callable[[], None],
        ping: Frame | None = None,
        idle: IdleFrame | None = None,
    ) -> None:
        """`ping`: the frame sent while idle (the dialect's own); `idle`: the stream's
        own progress frame, where it has one (`keepalive.progress_of`); else a
        comment."""
        self._frames = frames if isinstance(frames, AsyncGenerator) else _ready(frames)
        self._framing = framing
        self._idle_bytes = keepalive(framing, ping, idle)
        self._keepalive = Keepalive(keepalive_seconds)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", MEDIA_TYPES[self._framing].encode()),
            (b"cache-control", b"no-cache"),
            (b"connection", b"keep-alive"),
            (b"x-accel-buffering", b"no"),
        ]
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await self._race(receive, send, scope.get(BODY_SEND, send))
        except OSError:
            pass  # the client went away before the response started
        finally:
            self._on_close()

    async def _race(self, receive: Receive, send: Send, body_send: Send) -> None:
        """Write until the frames end or the client leaves, whichever comes first; then
        end the other tasks and wait for them (the writer closes its frames)."""
        loop = asyncio.get_running_loop()
        writer = loop.create_task(self._write(send, body_send))
        listener = loop.create_task(until_disconnect(receive))
        tasks = [writer, listener]
        if self._keepalive.interval > 0 and self._idle_bytes is not None:
            tasks.append(loop.create_task(self._ping(body_send, self._idle_bytes)))
        try:
            await asyncio.wait((writer, listener), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
        # Every task's outcome is looked at (none is logged as never retrieved); only
        # the writer's error can matter to the response.
        errors = {task: task.exception() for task in tasks if not task.cancelled()}
        if (error := errors.get(writer)) is not None:
            raise error

    async def _write(self, send: Send, body_send: Send) -> None:
        """The writer, as a task of its own: every token suspends and resumes only
        this short stack, not the ASGI middleware chain the response was called
        through."""
        framing = self._framing
        try:
            async for frame in self._frames:
                self._keepalive.sent()
                await body_send({"type": "http.response.body", "body": encode(frame, framing),
                                 "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away while we were writing
        finally:
            # Close the frame generator in this same task, also when cancelled
            # (cancelled once: the awaits in its `finally` run to their end).
            await self._frames.aclose()

    async def _ping(self, send: Send, idle_bytes: Callable[[], bytes]) -> None:
        # No lock: each ASGI message is a whole frame or comment, so a ping that lands
        # between two frames is still a valid stream.
        async def fill() -> None:
            await send({"type": "http.response.body", "body": idle_bytes(), "more_body": True})

        with contextlib.suppress(OSError):  # the client left: the listener ends the rest
            await self._keepalive.run(fill)


async def until_disconnect(receive: Receive) -> None:
    """Return when the client has left (`http.disconnect`, once the request's body has
    been read): the one listener for a client leaving, streamed or not."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _ready(frames: Iterable[Frame]) -> AsyncGenerator[Frame, None]:
    """Frames known in advance (a stored response replayed), as the stream the
    writer reads."""
    for frame in frames:
        yield frame
