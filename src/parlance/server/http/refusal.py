"""An error answered before any endpoint runs (the cross-site guard, admission, a
WebSocket's auth): the HTTP response, or for a WebSocket handshake its denial
response, or, where the server cannot send one, a policy-violation close (which the
server answers 403)."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from parlance.core.errors import ParlanceError
from parlance.dialects.base import Dialect, ErrorResponse


async def refuse(scope: Scope, receive: Receive, send: Send, rendered: ErrorResponse,
                 *, close: bool = False) -> None:
    """`close`: the HTTP connection is not kept alive after this answer."""
    headers = {**rendered.headers, **({"connection": "close"} if close else {})}
    response = JSONResponse(rendered.body, rendered.status, headers=headers)
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008})  # policy violation
            return
    await response(scope, receive, send)


def error_json(rendered: ErrorResponse) -> Response:
    """A rendered error as an HTTP response, for any endpoint."""
    return JSONResponse(rendered.body, rendered.status, headers=rendered.headers)


def error_response(dialect: Dialect[Any], error: ParlanceError) -> Response:
    return error_json(dialect.render_error(error))
