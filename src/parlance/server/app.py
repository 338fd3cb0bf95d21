"""The app factory: no module globals; the lifespan owns the engines."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from parlance.core.errors import EngineFailure, MethodNotAllowed, ParlanceError, RouteNotFound
from parlance.models.downloads import DownloadManager
from parlance.models.served import ServedModels
from parlance.server.handler import ServerSettings, error_json
from parlance.server.origins import CrossSiteGuard
from parlance.server.routes import build_routes, error_renderer
from parlance.store.responses import ResponseStore

log = logging.getLogger("parlance.server")


async def _no_route(request: Request, exc: Exception) -> Response:
    where = f"{request.method} {request.url.path}"
    error: ParlanceError
    if isinstance(exc, HTTPException) and exc.status_code == 405:
        error = MethodNotAllowed(f"Method not allowed for: {where}.", code="method_not_allowed")
    else:
        error = RouteNotFound(f"Unknown request URL: {where}.", code="unknown_url")
    return error_json(error_renderer(request.url.path)(error))


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error", exc_info=exc)
    return error_json(error_renderer(request.url.path)(
        EngineFailure("The server had an error while processing your request.")))


def create_app(models: ServedModels, settings: ServerSettings | None = None) -> Starlette:
    settings = settings or ServerSettings()
    data = settings.data_dir
    store = ResponseStore(data / "responses.sqlite3" if data else None,
                          retention=settings.responses_retention)
    downloads = (DownloadManager(settings.models_dir, allowed_hosts=settings.download_allow_hosts)
                 if settings.models_dir else None)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        models.start_reaper()
        yield
        if downloads is not None:
            await downloads.aclose()
        await models.aclose()
        store.close()

    return Starlette(
        routes=build_routes(models, settings, store, downloads),
        middleware=[Middleware(CrossSiteGuard, settings=settings)],
        exception_handlers={404: _no_route, 405: _no_route, Exception: _internal_error},
        lifespan=lifespan,
    )
