"""Connection guards uvicorn's HTTP protocol lacks.

uvicorn (httptools) closes a keep-alive connection idle after a response
(`timeout_keep_alive`), but never one that has not sent a whole request yet: a silent
or slow-header socket is held forever, and enough of them exhaust the process's file
descriptors. This protocol adds:

- a header deadline: a connection must deliver its request headers within
  `header_timeout` seconds of opening (or, when kept alive, of the next request's first
  byte), else it is closed. Bodies and responses (long streams) are not timed here.
- a connection limit: a connection opened while `max_connections` are already open is
  answered 503 (in the API's envelope, by `server/http/admission.py`) once its headers are
  read, and closed; one that sends nothing is closed by the header deadline.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from parlance.server.http.admission import OVER_CAPACITY

log = logging.getLogger("parlance.server")


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_connections: int = 256
    header_timeout: float = 10.0  # seconds to deliver a request's headers
    keepalive_timeout: float = 5.0  # seconds an idle kept-alive connection stays open


class GuardedHttpProtocol(HttpToolsProtocol):
    limits = ConnectionLimits()

    _header_timer: asyncio.TimerHandle | None = None
    _over_capacity = False

    @classmethod
    def with_limits(cls, limits: ConnectionLimits) -> type[GuardedHttpProtocol]:
        """The protocol class uvicorn instantiates per connection, bound to `limits`."""
        return type(cls.__name__, (cls,), {"limits": limits})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._over_capacity = len(self.connections) > self.limits.max_connections
        if self._over_capacity:
            log.warning("connection over the limit of %d: refused",
                        self.limits.max_connections)
        self._arm_header_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._header_timer is None:  # a kept-alive connection's next request
            self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        if self._over_capacity:
            extensions: dict[str, object] = self.scope.setdefault("extensions", {})  # type: ignore[assignment]
            extensions[OVER_CAPACITY] = self.limits.max_connections
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(self.limits.header_timeout,
                                                  self._headers_too_late)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_late(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()
