"""`GET /openapi.json` (the document of the routes this app serves, built once, on first
request) and `GET /docs` (the vendored Swagger UI showing it). Both answer without an
API key: the document names routes and shapes, nothing the server holds."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from parlance.core.errors import ResourceNotFound
from parlance.dialects.openai import errors as openai_errors
from parlance.server.http.refusal import Render, error_response
from parlance.server.openapi.document import openapi_document
from parlance.server.route_docs import EXAMPLES, describe
from parlance.server.settings import ServerSettings

_VIEWER = resources.files("parlance.server.openapi") / "viewer"
_ASSETS = {"swagger-ui-bundle.js": "text/javascript; charset=utf-8",
           "swagger-ui.css": "text/css; charset=utf-8",
           "docs.js": "text/javascript; charset=utf-8",
           "LICENSE": "text/plain; charset=utf-8",
           "NOTICE": "text/plain; charset=utf-8",
           "swagger-ui-bundle.js.LICENSE.txt": "text/plain; charset=utf-8",
           "VENDORED.md": "text/plain; charset=utf-8"}
# The page loads only the server's own files (no inline script, nothing from elsewhere)
_POLICY = ("default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
           "object-src 'none'; base-uri 'none'; frame-ancestors 'none'")


class ApiDocs:
    def __init__(self, settings: ServerSettings, refusals: Callable[[str], Render]) -> None:
        """`refusals`: the error envelope of a path (`routes.error_renderer`)."""
        self.keys_required = bool(settings.api_keys)
        self.refusals = refusals
        self._document: dict[str, Any] | None = None

    async def document(self, request: Request) -> Response:
        if self._document is None:
            self._document = openapi_document(request.app.router.routes, describe,
                                              refusals=self.refusals, examples=EXAMPLES,
                                              keys_required=self.keys_required)
        return JSONResponse(self._document)

    async def viewer(self, request: Request) -> Response:
        return HTMLResponse((_VIEWER / "index.html").read_text(encoding="utf-8"),
                            headers={"content-security-policy": _POLICY})

    async def asset(self, request: Request) -> Response:
        name = request.path_params["asset"]
        media = _ASSETS.get(name)
        if media is None:
            return error_response(openai_errors.render_error, ResourceNotFound(
                f"No such file of the viewer: '{name}'.", param="asset", code="not_found"))
        return Response((_VIEWER / name).read_bytes(), media_type=media,
                        headers={"cache-control": "public, max-age=86400"})
