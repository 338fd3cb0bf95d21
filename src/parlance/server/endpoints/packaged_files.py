"""Static files shipped inside a package (the web chat page, the vendored Swagger UI),
served read-only by the endpoints that show them.

Only files found by walking the package folder at start-up can be answered, each under
its path there: a request's name is looked up, never joined to a path, so no name
(`..`, an encoded slash, an absolute path) reaches another file. A name that is not one of them
is an unknown URL (404 in the path's own envelope, by the app's handler). Each answer
carries its media type (by suffix), the caller's Content-Security-Policy and caching,
and `nosniff`, so a browser never runs a file as something else."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import PurePosixPath

from starlette.exceptions import HTTPException
from starlette.responses import Response

MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".mjs": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml",
               ".png": "image/png", ".txt": "text/plain; charset=utf-8",
               ".md": "text/plain; charset=utf-8", ".woff2": "font/woff2",
               "": "text/plain; charset=utf-8"}  # LICENSE, NOTICE


class PackagedFiles:
    def __init__(self, package: str, folder: str, suffixes: frozenset[str], *, policy: str,
                 cache: str, referrer: str = "no-referrer") -> None:
        """The files under `folder` of `package` whose suffix is one of `suffixes` (""
        for none); `policy`: their Content-Security-Policy; `cache`: Cache-Control;
        `referrer`: Referrer-Policy."""
        if unknown := suffixes - MEDIA_TYPES.keys():
            raise ValueError(f"no media type for {', '.join(sorted(unknown))}")
        self._files = dict(_walk(resources.files(package) / folder, suffixes))
        self._bodies: dict[str, bytes] = {}
        self.headers = {"content-security-policy": policy, "x-content-type-options": "nosniff",
                        "referrer-policy": referrer, "cache-control": cache}

    def __contains__(self, name: str) -> bool:
        return name in self._files

    def names(self) -> list[str]:
        return sorted(self._files)

    def read(self, name: str) -> bytes:
        """The file's bytes, read once (KeyError: not one of these files)."""
        body = self._bodies.get(name)
        if body is None:
            body = self._bodies[name] = self._files[name].read_bytes()
        return body

    def send(self, name: str) -> Response:
        """The file `name` (its path under the folder), or the one 404."""
        if name not in self._files:
            raise HTTPException(404)  # answered by the app's handler for unknown URLs
        media_type = MEDIA_TYPES[PurePosixPath(name).suffix]
        return Response(self.read(name), media_type=media_type, headers=self.headers)


def _walk(root: Traversable, suffixes: frozenset[str]) -> Iterator[tuple[str, Traversable]]:
    """Every file under `root` with one of `suffixes`, by its path there (hidden files
    and folders left out)."""
    pending = [(root, PurePosixPath())]
    while pending:
        folder, prefix = pending.pop()
        for entry in folder.iterdir():
            if entry.name.startswith(".") or entry.name == "__pycache__":
                continue
            if entry.is_dir():
                pending.append((entry, prefix / entry.name))
            elif PurePosixPath(entry.name).suffix in suffixes:
                yield str(prefix / entry.name), entry
