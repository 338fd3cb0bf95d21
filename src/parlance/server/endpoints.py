"""The plain (non-generation) endpoints' common wrapper: authorize, run, and answer
any refusal in the API's own error envelope. A dict result is sent as JSON."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from parlance.core.errors import ParlanceError
from parlance.dialects.base import ErrorResponse
from parlance.server.auth import authorize
from parlance.server.handler import error_json

Work = Callable[[Request], Awaitable[Any]]  # a Response (or any ASGI app), or a dict
Endpoint = Callable[[Request], Awaitable[Any]]


def answering(work: Work, api_keys: tuple[str, ...],
              render_error: Callable[[ParlanceError], ErrorResponse]) -> Endpoint:
    async def endpoint(request: Request) -> Any:
        try:
            authorize(request, api_keys)
            result = await work(request)
        except ParlanceError as exc:
            return error_json(render_error(exc))
        return JSONResponse(result) if isinstance(result, dict) else result

    return endpoint
