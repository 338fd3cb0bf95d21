"""Whether a request (or a WebSocket handshake) is served at all. Refused with 503, in
the envelope of the API its path belongs to, and `Connection: close`: while the server
drains, and on a connection accepted beyond the connection limit
(`server/http/connections.py` marks its scope)."""

from __future__ import annotations

from typing import Protocol

from starlette.types import ASGIApp, Receive, Scope, Send

from parlance.core.errors import ParlanceError, ServerShuttingDown, TooManyConnections
from parlance.server.http.refusal import RenderFor, refuse

# The scope extension a connection over the limit carries: the limit it exceeded.
OVER_CAPACITY = "parlance.over_capacity"


class Draining(Protocol):
    """What admission asks of the server's drain (`calls/drain.py`)."""

    @property
    def draining(self) -> bool: ...


class Admission:
    def __init__(self, app: ASGIApp, drain: Draining, render: RenderFor) -> None:
        self.app = app
        self.drain = drain
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            refusal = self._refusal(scope)
            if refusal is not None:
                await refuse(scope, receive, send, self.render(scope["path"]), refusal,
                             close=True)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> ParlanceError | None:
        limit = scope.get("extensions", {}).get(OVER_CAPACITY)
        if limit is not None:
            return TooManyConnections(limit)
        if self.drain.draining:
            return ServerShuttingDown()
        return None
