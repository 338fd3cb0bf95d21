"""Upstream replicas on loopback for the upstream engine's tests: Parlance apps served
by uvicorn from threads (each its own event loop, as a separate server is), which
can be stopped and started again on the same port; and the gateway in front of them."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from parlance.engines.upstream import ClientSettings, Fleet, FleetSettings, ReplicaConfig
from parlance.models.served import ServedModels
from parlance.models.upstream import UpstreamModels
from parlance.server import ServerSettings, create_app

PATIENCE = 120.0


class AppServer:
    """uvicorn in a thread on a loopback port. Its lifespan is off unless asked: a
    replica's engines belong to the test; a gateway's fleet must run on the server's
    own event loop (its discovery, health checks and connections), so a gateway
    served here has its lifespan on."""

    def __init__(self, app: Any, port: int = 0, *, lifespan: str = "off") -> None:
        self.app = app
        self.port = port
        self.lifespan = lifespan
        self.server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> AppServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self._sock = sock
        config = uvicorn.Config(self.app, lifespan=self.lifespan, log_level="warning",
                                loop="asyncio",
                                http="h11", timeout_graceful_shutdown=1)
        server = self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                                        daemon=True, name=f"replica-{self.port}")
        self._thread.start()
        deadline = time.monotonic() + PATIENCE
        while not server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(PATIENCE)
        if self._sock is not None:
            self._sock.close()
        self.server = self._thread = self._sock = None

    def __enter__(self) -> AppServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def fleet(*urls: str, models: tuple[str, ...] = (), interval: float = 3600.0,
          weights: tuple[float, ...] = (), answer_timeout: float = 600.0,
          strict_max_tokens: bool = False) -> Fleet:
    """A fleet over these replicas; health checks only when the test asks (`check()`),
    unless it sets an interval."""
    configs = [ReplicaConfig(url, models=models, weight=weights[i] if weights else 1.0)
               for i, url in enumerate(urls)]
    client = ClientSettings(connect_timeout=5.0, answer_timeout=answer_timeout)
    return Fleet(configs, FleetSettings(health_interval=interval, startup_wait=30.0,
                                        client=client, strict_max_tokens=strict_max_tokens))


@contextlib.contextmanager
def serving_gateway(*urls: str, interval: float = 0.5) -> Iterator[tuple[AppServer, Fleet]]:
    """A gateway on a real socket (streams are streamed; a client can leave), its fleet
    checking the replicas every `interval` seconds from the server's own loop."""
    upstream_fleet = fleet(*urls, interval=interval)
    app, _ = gateway(upstream_fleet)
    with AppServer(app, lifespan="on") as server:
        yield server, upstream_fleet


def wait_for(predicate: Any, what: str, patience: float = PATIENCE) -> None:
    deadline = time.monotonic() + patience
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {patience}s: {what}")
        time.sleep(0.02)


def gateway(upstream_fleet: Fleet, **settings: Any):
    """A Parlance app serving only the fleet's models (no local model)."""
    models = ServedModels([], upstreams=UpstreamModels(upstream_fleet))
    settings.setdefault("request_timeout", 3600.0)
    return create_app(models, ServerSettings(**settings)), models


_replica_servers: dict[int, AppServer] = {}


def through_upstream(engine: Any, spec: Any, settings: ServerSettings):
    """An app that serves `spec` from `engine` one hop away: the engine behind a Parlance
    replica (one per engine, kept for the session), the app a gateway whose upstream
    engine streams from it. `PARLANCE_TEST_ENGINE=upstream` runs the real-engine HTTP
    tests this way (tests/support/real_engine.make_app), every dialect through the upstream
    engine."""
    from parlance.models.served import ServedModel

    server = _replica_servers.get(id(engine))
    if server is None:
        replica = ServedModels([ServedModel(spec, engine, int(time.time()))])
        server = AppServer(create_app(replica, ServerSettings(request_timeout=3600.0))).start()
        _replica_servers[id(engine)] = server
    names = tuple(n for n in spec.names() if not any(c in n for c in "*?["))
    upstream_fleet = Fleet([ReplicaConfig(server.base_url, models=names)])
    return create_app(ServedModels([], upstreams=UpstreamModels(upstream_fleet)), settings)
