"""Whether a request (or a WebSocket handshake) is served at all. Refused with 503, in
the envelope of the API its path belongs to, and `Connection: close`: while the server
drains, and on a connection accepted beyond the connection limit
(`server/http/connections.py` marks its scope)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from parlance.core.errors import ParlanceError, ServerShuttingDown, TooManyConnections
from parlance.server.generation.drain import Drain
from parlance.server.http.refusal import refuse
from parlance.server.routes import error_renderer

# The scope extension a connection over the limit carries: the limit it exceeded.
OVER_CAPACITY = "parlance.over_capacity"


class Admission:
    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            refusal = self._refusal(scope)
            if refusal is not None:
                await refuse(scope, receive, send, error_renderer(scope["path"]), refusal,
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
