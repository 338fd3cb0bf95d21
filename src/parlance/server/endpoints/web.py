"""The web chat page: `GET /` for a browser (`Accept: text/html`) and its files under
`/web/`. Every other `GET /` and `HEAD /` keeps the plain liveness answer that Claude
Code and Ollama clients probe.

The page only talks to the server's own HTTP APIs, so it works with every engine. Its
Content-Security-Policy allows scripts, styles and connections from this origin only:
no inline script or event handler runs, whatever a model's answer contains (the page
also sanitizes every answer it renders)."""

from __future__ import annotations

import functools

from starlette.requests import Request
from starlette.responses import Response

from parlance.server.endpoints.info import InfoEndpoints
from parlance.server.endpoints.packaged_files import PackagedFiles

ASSETS = "/web"
POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
          "font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
          "frame-ancestors 'none'")


@functools.cache
def page_files() -> PackagedFiles:
    """The page's files under `static/` (some 3 MB with the vendored highlighter, KaTeX
    and pdf.js, each read once per process on first use: every app shares them)."""
    return PackagedFiles("parlance.server.web", "static",
                         frozenset({".html", ".js", ".mjs", ".css", ".svg", ".png", ".txt",
                                    ".woff2"}),
                         policy=POLICY, cache="no-cache")


def wants_html(request: Request) -> bool:
    """A browser navigating here: its Accept names HTML (clients' probes send none, or */*)."""
    return request.method == "GET" and "text/html" in request.headers.get("accept", "")


class WebPage:
    def __init__(self, info: InfoEndpoints) -> None:
        self.info = info
        self.files = page_files()

    async def root(self, request: Request) -> Response:
        if not wants_html(request):
            return await self.info.root(request)
        return self.files.send("index.html")

    async def asset(self, request: Request) -> Response:
        return self.files.send(request.path_params["name"])
