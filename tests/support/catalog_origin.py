"""A model catalog on loopback that answers as Hugging Face's API does: the files of a
repository (`GET /api/models/{owner}/{repo}`: `siblings`, each an `rfilename`) and each
file (`GET /{owner}/{repo}/resolve/main/{file}`), for `pull owner/repo[:QUANT]`."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.gguf_writer import BASE_KV, TENSORS, write_gguf
from tests.support.live_server import ServerThread


class CatalogOrigin(ServerThread):
    """`repos`: each repository's files (every .gguf served as a tiny valid GGUF)."""

    def __init__(self, repos: dict[str, list[str]], tmp_path: Path) -> None:
        gguf = tmp_path / "catalog.gguf"
        write_gguf(gguf, BASE_KV, TENSORS)
        self.data = gguf.read_bytes()
        self.repos = repos
        self.asked: list[str] = []
        super().__init__(Starlette(routes=[
            Route("/api/models/{owner}/{repo}", self.listing),
            Route("/{owner}/{repo}/resolve/main/{file:path}", self.file)]))

    async def listing(self, request: Request) -> Response:
        repo = f"{request.path_params['owner']}/{request.path_params['repo']}"
        self.asked.append(request.url.path)
        if repo not in self.repos:
            return JSONResponse({"error": "Repository not found"}, status_code=404)
        return JSONResponse({"id": repo, "modelId": repo, "siblings": [
            {"rfilename": name} for name in self.repos[repo]]})

    async def file(self, request: Request) -> Response:
        repo = f"{request.path_params['owner']}/{request.path_params['repo']}"
        self.asked.append(request.url.path)
        if request.path_params["file"] not in self.repos.get(repo, []):
            return Response("Entry not found", status_code=404)
        return Response(self.data, media_type="application/octet-stream")
