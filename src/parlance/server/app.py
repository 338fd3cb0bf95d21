"""The app factory: no module globals; the lifespan owns the engines."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parlance.core.errors import EngineFailure, RouteNotFound
from parlance.dialects.openai_common import render_error
from parlance.models.served import ServedModels
from parlance.server.handler import ServerSettings
from parlance.server.routes import build_routes

log = logging.getLogger("parlance.server")


def _envelope(status: int, error: Exception) -> Response:
    rendered = render_error(error)  # type: ignore[arg-type]
    return JSONResponse(rendered.body, status, headers=rendered.headers)


async def _not_found(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    verb = "Unknown request URL" if status == 404 else "Method not allowed for"
    error = RouteNotFound(f"{verb}: {request.method} {request.url.path}.",
                          code="unknown_url" if status == 404 else "method_not_allowed")
    return _envelope(status, error)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error", exc_info=exc)
    return _envelope(500, EngineFailure("The server had an error while processing your request."))


def create_app(models: ServedModels, settings: ServerSettings | None = None) -> Starlette:
    settings = settings or ServerSettings()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await models.aclose()

    return Starlette(
        routes=build_routes(models, settings),
        exception_handlers={404: _not_found, 405: _not_found, Exception: _internal_error},
        lifespan=lifespan,
    )
