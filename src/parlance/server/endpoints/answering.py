"""The plain (non-generation) endpoints' common wrapper: authorize, run, and answer
any refusal in the API's own error envelope. A dict result is sent as JSON."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from parlance.core.errors import ParlanceError
from parlance.server.http.auth import authorize
from parlance.server.http.refusal import Render, error_response

Work = Callable[[Request], Awaitable[Any]]  # a Response (or any ASGI app), or a dict
Endpoint = Callable[[Request], Awaitable[Any]]


def answering(work: Work, api_keys: tuple[str, ...], render_error: Render,
              envelope: Callable[[Request], Render] | None = None) -> Endpoint:
    """`envelope` picks the renderer by request, for a path two APIs share
    (`/v1/models` answers Anthropic's clients, who send `anthropic-version`, in theirs)."""
    async def endpoint(request: Request) -> Any:
        try:
            authorize(request, api_keys)
            result = await work(request)
        except ParlanceError as exc:
            render = envelope(request) if envelope is not None else render_error
            return error_response(render, exc)
        return JSONResponse(result) if isinstance(result, dict) else result

    return endpoint
