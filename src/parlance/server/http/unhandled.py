"""An exception nobody caught (a bug): logged here, once, with its traceback and the
request's id, and answered with a 500 in the path's own envelope; it goes no further.

Starlette's own error handler re-raises every exception after answering it, so that
the server logs it too: each bug's traceback was written twice. Here the answer says
`connection: close`, which uvicorn honours, so the connection is still not reused
after a bug. A response that had already started cannot be answered any more: it is
left unfinished, and the server closes its connection (a client sees the stream cut,
never a complete-looking one)."""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parlance.core.errors import EngineFailure
from parlance.server.http.access_log import HEADER
from parlance.server.http.refusal import RenderFor, error_response

log = logging.getLogger("parlance.server")


class Unhandled:
    def __init__(self, app: ASGIApp, render: RenderFor) -> None:
        self.app = app
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception:
            record = scope.get("state", {}).get("access")
            log.exception("unhandled error in %s %s (%s %s)", scope.get("method"),
                          scope.get("path"), HEADER, getattr(record, "request_id", "-"))
            if started:
                return
            response = error_response(
                self.render(scope.get("path", "")),
                EngineFailure("The server had an error while processing your request."),
                close=True)
            await response(scope, receive, send)
