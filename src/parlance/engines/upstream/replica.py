"""One upstream server: its HTTP clients (one for streams, one for the rest), the
models it serves, its health (a circuit breaker) and its metrics.

The circuit is closed while the replica answers. A connection it refuses, a stream
it breaks or a failed health check opens it at once (passive ejection); so do
`FAILURES_TO_OPEN` server errors in a row. While open, requests go elsewhere; when
the cool-down ends one request may try it (half-open) and its outcome closes or
reopens the circuit, each reopening doubling the cool-down. A health check that
succeeds closes the circuit: a replica that comes back rejoins within one interval.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

import httpx2

from parlance.engines.metrics import Histogram
from parlance.engines.upstream.http1 import StreamPool
from parlance.engines.upstream.sse import MAX_EVENT_BYTES

FAILURES_TO_OPEN = 3
COOL_DOWN = 1.0  # seconds, doubled on each reopening
MAX_COOL_DOWN = 30.0

State = Literal["closed", "open", "half_open"]


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """An upstream as the operator configured it. `models` empty: whatever its
    `/v1/models` lists."""

    url: str
    api_key: str | None = None
    models: tuple[str, ...] = ()
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class ClientSettings:
    connect_timeout: float = 5.0
    health_timeout: float = 5.0
    # How long a replica may take to answer a generation request (status and headers).
    # llama-server answers only once the prompt is evaluated, so this bounds a prefill
    # too; a replica that takes longer counts as failed (a hung one is left behind).
    answer_timeout: float = 600.0
    max_connections: int = 1024  # streams at once to one replica
    # One SSE event, or one embeddings answer (a larger one fails its stream or answer)
    max_event_bytes: int = MAX_EVENT_BYTES


@dataclass(slots=True)
class ReplicaMetrics:
    """Per-replica counters, rendered at /metrics with a `replica` label."""

    requests: int = 0  # streams (and counts) sent to it
    failures: int = 0  # refused connections, server errors, broken streams
    ejections: int = 0  # times its circuit opened
    affinity_hits: int = 0  # requests sent to it because it held their prefix
    tokens_relayed: int = 0  # completion tokens it streamed through us
    time_to_first_token: Histogram = field(default_factory=Histogram)


class CircuitBreaker:
    def __init__(self) -> None:
        self.state: State = "closed"
        self.failures = 0
        self.open_until = 0.0
        self.cool_down = COOL_DOWN
        self.trial = False  # a half-open trial request is out
        self.opened = 0  # times it opened

    def available(self, now: float) -> bool:
        if self.state == "closed":
            return True
        if self.state == "open" and now >= self.open_until:
            self.state = "half_open"
            self.trial = False
        return self.state == "half_open" and not self.trial

    def begin(self) -> None:
        if self.state == "half_open":
            self.trial = True

    def succeeded(self) -> None:
        self.state, self.failures, self.trial, self.cool_down = "closed", 0, False, COOL_DOWN

    def failed(self, now: float, *, at_once: bool = False) -> None:
        self.failures += 1
        if at_once or self.state == "half_open" or self.failures >= FAILURES_TO_OPEN:
            self.open(now)

    def open(self, now: float) -> None:
        if self.state != "open":
            self.opened += 1
        else:
            self.cool_down = min(self.cool_down * 2, MAX_COOL_DOWN)
        self.state, self.trial = "open", False
        self.open_until = now + self.cool_down


def base_url(url: str) -> str:
    """The server's root: a trailing `/v1` (as OpenAI clients are configured) dropped."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"upstream URL '{url}' must be http(s)://host[:port][/path]")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[:-3]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def display_url(url: str) -> str:
    """The URL without credentials, as metrics and logs show it."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class Replica:
    def __init__(self, config: ReplicaConfig, settings: ClientSettings | None = None) -> None:
        settings = settings or ClientSettings()
        if config.weight <= 0:
            raise ValueError(f"upstream {config.url}: weight must be positive")
        self.config = config
        self.url = base_url(config.url)
        self.label = display_url(self.url)
        self.weight = config.weight
        headers = {"authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        # One pooled client per replica; proxies from the environment are not used (the
        # operator named this address). No read timeout: a stream may pause for a long
        # prefill; the request deadline and the client leaving end it instead.
        self.client = httpx2.AsyncClient(
            base_url=self.url, headers=headers, trust_env=False,
            timeout=httpx2.Timeout(settings.connect_timeout, read=None, write=60.0, pool=None),
            limits=httpx2.Limits(max_connections=settings.max_connections,
                                 max_keepalive_connections=settings.max_connections,
                                 keepalive_expiry=60.0))
        # Generation streams (and what else goes through `opening.Opener`) take the
        # lean client of `http1.py`: the relay's per-token cost is mostly the client's.
        self.streams = StreamPool(self.url, headers, connect_timeout=settings.connect_timeout,
                                  max_connections=settings.max_connections)
        self.health_timeout = settings.health_timeout
        self.answer_timeout = settings.answer_timeout
        self.max_event_bytes = settings.max_event_bytes
        self.models: frozenset[str] = frozenset(config.models)
        self.context_lengths: dict[str, int] = {}  # model → context, where the server says
        self.slots: int | None = None  # sequences it decodes at once, where it says
        self.owned_by: str | None = None  # its /v1/models' owned_by (vllm, llamacpp, …)
        self.discovered = bool(config.models)
        self.breaker = CircuitBreaker()
        self.outstanding = 0
        self.metrics = ReplicaMetrics()

    def __repr__(self) -> str:
        return f"Replica({self.label})"

    @property
    def healthy(self) -> bool:
        return self.breaker.state != "open"

    def available(self, now: float | None = None) -> bool:
        return self.breaker.available(time.monotonic() if now is None else now)

    def load(self) -> float:
        return self.outstanding / self.weight

    # -- outcomes -------------------------------------------------------------------

    def acquire(self) -> None:
        self.outstanding += 1
        self.metrics.requests += 1
        self.breaker.begin()

    def release(self) -> None:
        self.outstanding -= 1

    def succeeded(self) -> None:
        self.breaker.succeeded()

    def failed(self, *, at_once: bool = False) -> None:
        """A server error (`at_once`: the server is gone: a refused connection or a
        broken stream)."""
        self.metrics.failures += 1
        before = self.breaker.opened
        self.breaker.failed(time.monotonic(), at_once=at_once)
        self.metrics.ejections += self.breaker.opened - before

    def down(self) -> None:
        """A failed health check."""
        before = self.breaker.opened
        self.breaker.open(time.monotonic())
        self.metrics.ejections += self.breaker.opened - before

    def up(self) -> None:
        """A health check that succeeded."""
        self.breaker.succeeded()

    async def aclose(self) -> None:
        self.streams.close()
        await self.client.aclose()
