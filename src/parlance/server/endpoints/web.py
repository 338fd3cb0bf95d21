"""The web chat page: `GET /` for a browser (`Accept: text/html`) and its files under
`/web/`. Every other `GET /` and `HEAD /` keeps the plain liveness answer that Claude
Code and Ollama clients probe.

The page only talks to the server's own HTTP APIs, so it works with every engine. Its
Content-Security-Policy allows scripts, styles and connections from this origin only:
no inline script or event handler runs, whatever a model's answer contains (the page
also sanitizes every answer it renders)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from parlance.server.endpoints.info import InfoEndpoints

ASSETS = "/web"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png",
         ".txt": "text/plain; charset=utf-8"}
POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
          "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"content-security-policy": POLICY, "x-content-type-options": "nosniff",
           "referrer-policy": "no-referrer", "cache-control": "no-cache"}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    media_type: str


@functools.cache
def load_assets() -> dict[str, Asset]:
    """Every file of the page by its path under `static/`, read once per process (some
    200 KB; every app shares them)."""
    root = resources.files("parlance.server.web") / "static"
    found: dict[str, Asset] = {}
    pending = [(root, PurePosixPath())]
    while pending:
        folder, prefix = pending.pop()
        for entry in folder.iterdir():
            if entry.is_dir():
                pending.append((entry, prefix / entry.name))
            elif (kind := TYPES.get(PurePosixPath(entry.name).suffix)) is not None:
                found[str(prefix / entry.name)] = Asset(entry.read_bytes(), kind)
    return found


def wants_html(request: Request) -> bool:
    """A browser navigating here: its Accept names HTML (clients' probes send none, or */*)."""
    return request.method == "GET" and "text/html" in request.headers.get("accept", "")


class WebPage:
    def __init__(self, info: InfoEndpoints) -> None:
        self.info = info
        self.assets = load_assets()

    async def root(self, request: Request) -> Response:
        if not wants_html(request):
            return await self.info.root(request)
        return self._send(self.assets["index.html"])

    async def asset(self, request: Request) -> Response:
        found = self.assets.get(request.path_params["name"])
        if found is None:
            raise HTTPException(404)  # answered by the app's handler for unknown routes
        return self._send(found)

    @staticmethod
    def _send(asset: Asset) -> Response:
        return Response(asset.body, media_type=asset.media_type, headers=HEADERS)
