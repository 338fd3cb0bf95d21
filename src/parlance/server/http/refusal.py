"""Every error the server answers is rendered here: `error_response` turns a
`ParlanceError` into the HTTP response in the envelope of its API (the renderer is the
dialect's `render_error`), for the endpoints, the app's handlers of unknown routes and
unexpected exceptions, and `refuse`, which answers before any endpoint runs (the
cross-site guard, admission, a WebSocket's auth): for a WebSocket handshake with its
denial response or, where the server cannot send one, a policy-violation close (which
the server answers 403)."""

from __future__ import annotations

from collections.abc import Callable

from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from parlance.core.errors import ParlanceError
from parlance.dialects.base import ErrorResponse

Render = Callable[[ParlanceError], ErrorResponse]  # a dialect's `render_error`
# The error envelope of a request path (`routes.error_renderer`, given to the
# middlewares by `app.py`: they sit below the route table and cannot import it)
RenderFor = Callable[[str], Render]


def error_response(render: Render, error: ParlanceError, *, close: bool = False) -> Response:
    """`error` in the envelope `render` makes; `close`: the HTTP connection is not kept
    alive after this answer."""
    rendered = render(error)
    headers = {**rendered.headers, **({"connection": "close"} if close else {})}
    return JSONResponse(rendered.body, rendered.status, headers=headers)


async def refuse(scope: Scope, receive: Receive, send: Send, render: Render,
                 error: ParlanceError, *, close: bool = False) -> None:
    """Answer `error` before any endpoint runs (see `error_response` for `close`)."""
    response = error_response(render, error, close=close)
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008})  # policy violation
            return
    await response(scope, receive, send)
