"""A model download origin on 127.0.0.1 (uvicorn in a thread) that misbehaves on request:
it drops the connection, ignores Range, answers 404, serves a web page, redirects, or
holds the second half of the file until the test opens a gate (`/{mode}/{name}`)."""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from tests.support.live_server import ServerThread

DATA = b"GGUF" + random.Random(7).randbytes(300_000 - 4)
PAGE = b"<!doctype html><title>Model card</title>" * 100
CHUNK = 16_384
DROP_AT = 100_000  # the `drop` origin closes its first answer after this many bytes
HALF = 150_000  # the `gated` origin holds the rest until the gate opens


class Origin:
    """What the origin saw, and the gate of its `gated` mode."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        self.hits: Counter[str] = Counter()
        self.gate = threading.Event()

    def ranges(self, path: str) -> list[str | None]:
        return [rng for seen, rng in self.requests if seen == path]


async def _body(data: bytes, start: int, drop_at: int | None, gate: threading.Event | None):
    pos = start
    while pos < len(data):
        while gate is not None and pos >= HALF and not gate.is_set():
            await asyncio.sleep(0.005)
        end = min(len(data), pos + CHUNK, drop_at or len(data))
        if gate is not None and pos < HALF:
            end = min(end, HALF)
        if pos == end:
            raise ConnectionAbortedError("the test origin drops the connection")
        yield data[pos:end]
        pos = end


async def serve(request: Request) -> Response:
    origin: Origin = request.app.state.origin
    mode, path = request.path_params["mode"], request.url.path
    origin.requests.append((path, request.headers.get("range")))
    origin.hits[path] += 1
    if mode == "missing":
        return PlainTextResponse("no such file", status_code=404)
    if mode == "redirect":
        return RedirectResponse(request.query_params["to"], status_code=302)
    data = PAGE if mode == "page" else DATA
    start, status, headers = 0, 200, {"accept-ranges": "bytes"}
    if (rng := request.headers.get("range")) and mode != "norange":
        start, status = int(rng.removeprefix("bytes=").rstrip("-")), 206
        headers["content-range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
    if mode != "unsized":  # unsized: no length announced (chunked)
        headers["content-length"] = str(len(data) - start)
    drop_at = DROP_AT if mode == "drop" and origin.hits[path] == 1 else None
    gate = origin.gate if mode == "gated" else None
    return StreamingResponse(_body(data, start, drop_at, gate), status_code=status,
                             headers=headers, media_type="application/octet-stream")


class OriginServer(ServerThread):
    """The origin app served on a free 127.0.0.1 port, from a thread of its own."""

    def __init__(self) -> None:
        self.app = Starlette(routes=[Route("/{mode}/{name}", serve)])
        self.app.state.origin = Origin()
        super().__init__(self.app, log_level="critical", loop="auto", http="auto",
                         timeout_graceful_shutdown=1)
