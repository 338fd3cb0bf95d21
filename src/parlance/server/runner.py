"""Running the app under uvicorn: the connection guards, the logging the CLI shows,
and a shutdown that drains.

uvicorn, told to stop (SIGTERM, SIGINT), closes its listeners, waits up to
`timeout_graceful_shutdown` for open connections and then cancels what still runs:
a stream cut that way ends with no terminal frame and an unterminated body. So the
drain (`server/calls/drain.py`) begins at the start of uvicorn's shutdown, ends the
remaining generations by contract when its grace is over, and uvicorn's own timeout
is set beyond that grace, as a last resort only. A second signal ends the grace at
once (the streams still end by contract).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import uvicorn
from starlette.applications import Starlette

from parlance.core.errors import Unavailable
from parlance.server.calls.drain import Drain
from parlance.server.http.connections import ConnectionLimits, GuardedHttpProtocol

# How long after the grace uvicorn still waits for connections to close before it
# cancels them: ending the streams by contract takes milliseconds, not this.
SHUTDOWN_MARGIN = 5.0


@dataclass(frozen=True, slots=True)
class Listen:
    host: str = "127.0.0.1"
    port: int = 8080
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        super().__init__(config)
        self.drain = drain
        self.on_started: Callable[[], None] | None = None  # once it accepts connections
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)
        if self.started and self.on_started is not None:
            self.on_started()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not uvicorn's own handler: it would raise the signal again after serving, and
        # a drained shutdown is a clean exit (status 0).
        if self.should_exit and self._loop is not None:
            self._loop.call_soon_threadsafe(self.drain.end_grace)
        self.should_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.drain.begin()
        await super().shutdown(sockets)


def server(app: Starlette, listen: Listen, **config: Any) -> DrainingServer:
    """A server for `app` (built by `create_app`, which owns the drain)."""
    drain: Drain = app.state.drain
    limits = listen.limits
    settings: dict[str, Any] = {
        "host": listen.host, "port": listen.port,
        "http": GuardedHttpProtocol.with_limits(limits),
        "timeout_keep_alive": limits.keepalive_timeout,
        "timeout_graceful_shutdown": drain.grace + SHUTDOWN_MARGIN,
        "access_log": False,  # parlance.access replaces it (server/http/access_log.py)
        "log_config": None,  # the process's own logging (run() sets the CLI's)
        **config,
    }
    return DrainingServer(uvicorn.Config(app, **settings), drain)


def log_config(level: str = "INFO") -> dict[str, Any]:
    """uvicorn's warnings and errors, and Parlance's own loggers (the access lines
    among them) at `level`, on stderr."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain",
                                "stream": "ext://sys.stderr"}},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            "parlance": {"handlers": ["stderr"], "level": level, "propagate": False},
        },
    }


def bind(listen: Listen) -> socket.socket:
    """The listening socket, bound before anything else starts: a port in use is one
    clear error at once (not after a model has loaded, nor after a line saying the
    server is serving)."""
    family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
    sock = socket.socket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((listen.host, listen.port))
    except OSError as exc:
        sock.close()
        why = exc.strerror or str(exc)
        raise Unavailable(f"cannot listen on {listen.host}:{listen.port}: {why} (another "
                          "server there? stop it, or choose another --port)") from None
    sock.set_inheritable(True)
    return sock


def run(app: Starlette, listen: Listen, sock: socket.socket | None = None,
        on_started: Callable[[], None] | None = None) -> None:
    """Serve until told to stop, draining on the way out; on `sock` when given (see
    `bind`), telling `on_started` once connections are accepted."""
    running = server(app, listen, log_config=log_config())
    running.on_started = on_started
    running.run(sockets=[sock] if sock is not None else None)
