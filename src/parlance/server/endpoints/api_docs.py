"""`GET /openapi.json` (the document of the routes this app serves, built once, on first
request) and `GET /docs` (the vendored Swagger UI showing it). Both answer without an
API key: the document names routes and shapes, nothing the server holds."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parlance.server.endpoints.packaged_files import PackagedFiles
from parlance.server.http.refusal import Render
from parlance.server.openapi.document import openapi_document
from parlance.server.openapi.route_docs import describe, examples
from parlance.server.settings import ServerSettings

# The page loads only the server's own files (no inline script, nothing from elsewhere)
_POLICY = ("default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
           "object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
_PAGE = "index.html"


@functools.cache
def viewer_page() -> PackagedFiles:
    """The page `/docs` answers (not under a name of its own)."""
    return _viewer(frozenset({".html"}), cache="no-cache")


@functools.cache
def viewer_files() -> PackagedFiles:
    """What the page loads, and the bundle's licence and version notes (the bundle is
    some 1.5 MB, unchanged until Parlance is: cached by browsers for a day)."""
    return _viewer(frozenset({".js", ".css", ".txt", ".md", ""}),
                   cache="public, max-age=86400")


def _viewer(suffixes: frozenset[str], *, cache: str) -> PackagedFiles:
    # (same-origin, not no-referrer: "Try it out" requests keep their Origin)
    return PackagedFiles("parlance.server.openapi", "viewer", suffixes, policy=_POLICY,
                         cache=cache, referrer="same-origin")


class ApiDocs:
    def __init__(self, settings: ServerSettings, refusals: Callable[[str], Render],
                 example_model: Callable[[], str | None] = lambda: None) -> None:
        """`refusals`: the error envelope of a path (`routes.error_renderer`);
        `example_model`: the model the examples name (the server's default one)."""
        self.keys_required = bool(settings.api_keys)
        self.refusals = refusals
        self.example_model = example_model
        self._document: dict[str, Any] | None = None

    async def document(self, request: Request) -> Response:
        if self._document is None:
            self._document = openapi_document(request.app.router.routes, describe,
                                              refusals=self.refusals,
                                              examples=examples(self.example_model()),
                                              keys_required=self.keys_required)
        return JSONResponse(self._document)

    async def viewer(self, request: Request) -> Response:
        return viewer_page().send(_PAGE)

    async def asset(self, request: Request) -> Response:
        return viewer_files().send(request.path_params["asset"])
