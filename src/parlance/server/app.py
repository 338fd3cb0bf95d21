"""The app factory: no module globals; the lifespan owns the engines."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from parlance.core.errors import MethodNotAllowed, ParlanceError, RouteNotFound
from parlance.models.downloads import DownloadManager
from parlance.models.served import ServedModels
from parlance.server.calls.drain import Drain
from parlance.server.http.access_log import CLIENT_CLOSED, AccessLog
from parlance.server.http.admission import Admission
from parlance.server.http.origins import CrossSiteGuard
from parlance.server.http.refusal import error_response
from parlance.server.http.unhandled import Unhandled
from parlance.server.router import IndexedRouter
from parlance.server.routes import build_routes, error_renderer
from parlance.server.settings import ServerSettings
from parlance.store.conversations import ConversationStore
from parlance.store.responses import ResponseStore


async def _no_route(request: Request, exc: Exception) -> Response:
    where = f"{request.method} {request.url.path}"
    error: ParlanceError
    if isinstance(exc, HTTPException) and exc.status_code == 405:
        error = MethodNotAllowed(f"Method not allowed for: {where}.", code="method_not_allowed")
    else:
        error = RouteNotFound(f"Unknown request URL: {where}.", code="unknown_url")
    return error_response(error_renderer(request.url.path), error)


async def _client_left(request: Request, exc: Exception) -> Response:
    """The client went away while its request body was being read: nobody to answer,
    nothing to log but its access line."""
    return Response(status_code=CLIENT_CLOSED)


def create_app(models: ServedModels, settings: ServerSettings | None = None) -> Starlette:
    settings = settings or ServerSettings()
    data = settings.data_dir
    store = ResponseStore(data / "responses.sqlite3" if data else None,
                          retention=settings.responses_retention)
    conversations = ConversationStore(data / "conversations.sqlite3" if data else None)
    downloads = (DownloadManager(settings.models_dir, allowed_hosts=settings.download_allow_hosts,
                                 limits=settings.download_limits,
                                 catalog=settings.catalog_url)
                 if settings.models_dir else None)

    drain = Drain(settings.shutdown_grace)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await models.start()
        yield
        drain.end_grace()  # normally done by the server's shutdown (server/runner.py)
        if downloads is not None:
            await downloads.aclose()
        await models.aclose()
        store.close()
        conversations.close()

    app = Starlette(
        routes=build_routes(models, settings, store, downloads, conversations),
        # (a bug is answered, and logged once, by `Unhandled`, inside the access log)
        # (the middlewares answer in the envelope of each path's API: `error_renderer`)
        middleware=[Middleware(AccessLog), Middleware(Unhandled, render=error_renderer),
                    Middleware(CrossSiteGuard, settings=settings, render=error_renderer),
                    Middleware(Admission, drain=drain, render=error_renderer)],
        exception_handlers={404: _no_route, 405: _no_route, ClientDisconnect: _client_left},
        lifespan=lifespan,
    )
    app.router = IndexedRouter(app.router.routes, lifespan=lifespan)
    app.state.drain = drain  # every call's supervisor enrols in it
    return app
