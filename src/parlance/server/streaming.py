"""The one streaming response: encodes frames in the dialect's framing (SSE or
NDJSON), writes them, pings while idle, and turns a client disconnect into
cancellation at once.

Three tasks race in a task group (as sse-starlette does): the writer, the
keepalive pinger and the disconnect listener. Whichever ends first cancels the
others; cancelling the writer closes the frame generator, whose `finally`
cancels the engine generation.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable, Iterable

import anyio
from starlette.types import Receive, Scope, Send

from parlance.dialects.base import Frame
from parlance.server.framing import MEDIA_TYPES, Framing, encode, keepalive


class EventStreamResponse:
    def __init__(
        self,
        frames: AsyncGenerator[Frame, None] | Iterable[Frame],
        *,
        framing: Framing,
        keepalive_seconds: float,
        on_close: Callable[[], None],
        ping: Frame | None = None,
    ) -> None:
        """`ping`: the frame sent while idle (the dialect's own); None: a comment."""
        self._frames = frames if isinstance(frames, AsyncGenerator) else _ready(frames)
        self._framing = framing
        self._keepalive = encode(ping, framing) if ping is not None else keepalive(framing)
        self._keepalive_seconds = keepalive_seconds
        self._on_close = on_close
        self._last_sent = time.monotonic()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-type", MEDIA_TYPES[self._framing].encode()),
            (b"cache-control", b"no-cache"),
            (b"connection", b"keep-alive"),
            (b"x-accel-buffering", b"no"),
        ]
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            async with anyio.create_task_group() as group:
                group.start_soon(self._listen_for_disconnect, receive, group.cancel_scope)
                if self._keepalive_seconds > 0 and self._keepalive is not None:
                    group.start_soon(self._ping, send)
                group.start_soon(self._write_all, send, group.cancel_scope)
        except OSError:
            pass  # the client went away before the response started
        finally:
            self._on_close()

    async def _write_all(self, send: Send, scope: anyio.CancelScope) -> None:
        """The writer, as a task of its own: every token suspends and resumes only
        this short stack, not the ASGI middleware chain the response was called
        through (a few µs per token; on 2 cores they are taken from decoding)."""
        try:
            await self._write(send)
        except OSError:
            pass  # the client went away while we were writing
        finally:
            scope.cancel()

    async def _write(self, send: Send) -> None:
        try:
            framing = self._framing
            async for frame in self._frames:
                await self._send(send, encode(frame, framing))
            await self._send(send, b"", more=False)
        finally:
            # Close the frame generator in this same task, even when cancelled.
            with anyio.CancelScope(shield=True):
                await self._frames.aclose()

    async def _send(self, send: Send, body: bytes, *, more: bool = True) -> None:
        # No lock: each ASGI message is a whole frame or comment, so a ping that
        # lands between two frames is still a valid stream.
        self._last_sent = time.monotonic()
        await send({"type": "http.response.body", "body": body, "more_body": more})

    async def _ping(self, send: Send) -> None:
        while True:
            idle_until = self._last_sent + self._keepalive_seconds
            await anyio.sleep(max(0.0, idle_until - time.monotonic()))
            if time.monotonic() - self._last_sent >= self._keepalive_seconds:
                await self._send(send, self._keepalive or b"")

    async def _listen_for_disconnect(self, receive: Receive, scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                scope.cancel()
                return


async def _ready(frames: Iterable[Frame]) -> AsyncGenerator[Frame, None]:
    """Frames known in advance (a stored response replayed), as the stream the
    writer reads."""
    for frame in frames:
        yield frame
