"""Real uvicorn servers on a free loopback port: `serving`, a task of the test's own event
loop (the test's asyncio objects, a fake engine's gates, are the server's own), and
`ServerThread`, in a thread of its own. Clients reach both over TCP (WebSockets, streams
read as they come)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn

STARTUP = 120.0  # a bound on starting and stopping, for a busy machine; nothing is timed


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Yields "127.0.0.1:<port>"; the lifespan is off (the test owns the engine)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, lifespan="off", log_level="warning",
                            timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # it failed to start: raise why
            await asyncio.sleep(0.01)
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)
        sock.close()


class ServerThread:
    """A real uvicorn server on a free localhost port, in a thread and event loop of its
    own (for tests whose own loop must not serve it: a synchronous test, or one that
    blocks). The lifespan is off: the app's would close the engine the test owns."""

    def __init__(self, app, **config: Any) -> None:
        """`config`: uvicorn settings instead of the defaults below."""
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        settings = {"log_level": "warning", "loop": "asyncio", "http": "h11",
                    "timeout_graceful_shutdown": 2, **config}
        self.server = uvicorn.Server(uvicorn.Config(app, lifespan="off", **settings))
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True,
            name="test-uvicorn",
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self._thread.start()
        deadline = time.perf_counter() + STARTUP
        while not self.server.started:
            if time.perf_counter() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=STARTUP)
        self._sock.close()
