"""The download manager against a real HTTP origin on 127.0.0.1 (uvicorn in a thread).

The origin misbehaves on request: it drops the connection, ignores Range, answers 404, serves
a web page, or holds the second half of the file until the test opens a gate.
"""

from __future__ import annotations

import asyncio
import random
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Self

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from parlance.models.downloads import DownloadManager, destination_for

DATA = b"GGUF" + random.Random(7).randbytes(300_000 - 4)
PAGE = b"<!doctype html><title>Model card</title>" * 100
CHUNK = 16_384
DROP_AT = 100_000  # the `drop` origin closes its first answer after this many bytes
HALF = 150_000  # the `gated` origin holds the rest until the gate opens
ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


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
    data = PAGE if mode == "page" else DATA
    start, status, headers = 0, 200, {"accept-ranges": "bytes"}
    if (rng := request.headers.get("range")) and mode != "norange":
        start, status = int(rng.removeprefix("bytes=").rstrip("-")), 206
        headers["content-range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
    headers["content-length"] = str(len(data) - start)
    drop_at = DROP_AT if mode == "drop" and origin.hits[path] == 1 else None
    gate = origin.gate if mode == "gated" else None
    return StreamingResponse(_body(data, start, drop_at, gate), status_code=status,
                             headers=headers, media_type="application/octet-stream")


class OriginServer:
    """uvicorn serving the origin app on a free 127.0.0.1 port, in a daemon thread."""

    def __init__(self) -> None:
        self.app = Starlette(routes=[Route("/{mode}/{name}", serve)])
        self.app.state.origin = Origin()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        config = uvicorn.Config(self.app, lifespan="off", log_level="critical",
                                timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]},
                                        daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        deadline = time.monotonic() + 5
        while not self.server.started:
            assert time.monotonic() < deadline and self._thread.is_alive(), "origin did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=5)
        self._sock.close()


@pytest.fixture(scope="module")
def origin_server() -> Iterator[OriginServer]:
    with OriginServer() as server:
        yield server


@pytest.fixture
def origin(origin_server: OriginServer) -> Iterator[Origin]:
    fresh = Origin()
    origin_server.app.state.origin = fresh
    yield fresh
    fresh.gate.set()  # never leave an origin response waiting


@pytest.fixture
def base_url(origin_server: OriginServer) -> str:
    return origin_server.base_url


def make_manager(models_dir: Path, retry_delays: tuple[float, ...] = (0.01, 0.01, 0.01)):
    # trust_env=False: a proxy in the environment must not stand between us and 127.0.0.1
    return DownloadManager(models_dir, retry_delays=retry_delays,
                           client_factory=lambda: httpx.AsyncClient(trust_env=False, timeout=5))


@pytest.fixture
async def manager(tmp_path: Path) -> AsyncIterator[DownloadManager]:
    manager = make_manager(tmp_path / "models")
    yield manager
    await manager.aclose()


async def settle(manager: DownloadManager, job_id: str) -> dict:
    """The job's status once it is no longer downloading."""
    deadline = time.monotonic() + 5
    while (status := manager.status(job_id))["status"] == "downloading":
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.005)
    return status


async def until_downloaded(manager: DownloadManager, job_id: str, nbytes: int) -> dict:
    deadline = time.monotonic() + 5
    while (status := manager.status(job_id))["downloaded_bytes"] < nbytes:
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.005)
    return status


def ggufs(root: Path) -> list[Path]:
    return sorted(root.rglob("*.gguf"))


# -- destinations and bad URLs ----------------------------------------------------------------


def test_destination_of_hugging_face_and_other_hosts(tmp_path: Path) -> None:
    hf = "https://huggingface.co/bartowski/Qwen-GGUF/resolve/main/q4/Qwen-Q4_K_M.gguf?download=1"
    assert destination_for(tmp_path, hf) == tmp_path / "bartowski/Qwen-GGUF/Qwen-Q4_K_M.gguf"
    other = "http://Example.org:8080/files/tiny%20model.GGUF"
    assert destination_for(tmp_path, other) == tmp_path / "example.org/tiny model.gguf"


@pytest.mark.parametrize(("url", "message"), [
    ("ftp://example.org/model.gguf", "http"),
    ("not a url", "http"),
    ("https:///model.gguf", "http"),
    ("https://example.org/README.md", "direct link to a .gguf file"),
    ("https://example.org/", "direct link to a .gguf file"),
    ("https://huggingface.co/owner/repo/blob/main/model.gguf", "resolve"),
    ("https://example.org/a/..%2F..%2Fx.gguf", "unsafe"),
])
async def test_bad_urls_are_refused(manager: DownloadManager, url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        await manager.start(url)


# -- happy path, status, atomic appearance ----------------------------------------------------


async def test_status_while_downloading_and_when_completed(
    manager: DownloadManager, origin: Origin, base_url: str,
) -> None:
    first = await manager.start(f"{base_url}/gated/m.gguf")
    assert re.fullmatch(r"job_[0-9a-f]{10}", first["job_id"])
    assert first["status"] == "downloading"
    assert first["total_size_bytes"] == len(DATA)
    assert ISO_UTC.fullmatch(first["started_at"])
    assert "bytes_per_second" in first and "completed_at" not in first

    midway = await until_downloaded(manager, first["job_id"], HALF)
    assert midway["downloaded_bytes"] == HALF and midway["bytes_per_second"] > 0
    assert ISO_UTC.fullmatch(midway["estimated_completion"])
    assert midway["estimated_completion"] >= midway["started_at"]
    assert "completed_at" not in midway and "error" not in midway

    origin.gate.set()
    done = await settle(manager, first["job_id"])
    assert done["status"] == "completed" and "error" not in done
    assert done["downloaded_bytes"] == done["total_size_bytes"] == len(DATA)
    assert ISO_UTC.fullmatch(done["completed_at"]) and done["completed_at"] >= done["started_at"]
    assert "bytes_per_second" not in done and "estimated_completion" not in done
    assert manager.status("job_0000000000") is None


async def test_model_file_appears_only_when_complete(
    manager: DownloadManager, origin: Origin, base_url: str, tmp_path: Path,
) -> None:
    job = await manager.start(f"{base_url}/gated/m.gguf")
    dest = tmp_path / "models/127.0.0.1/m.gguf"
    await until_downloaded(manager, job["job_id"], HALF)
    assert ggufs(tmp_path) == []  # nothing a model scan would pick up
    assert dest.with_name("m.gguf.part").stat().st_size == HALF

    origin.gate.set()
    assert (await settle(manager, job["job_id"]))["status"] == "completed"
    assert ggufs(tmp_path) == [dest] and dest.read_bytes() == DATA
    assert not dest.with_name("m.gguf.part").exists()
    assert await manager.start(f"{base_url}/gated/m.gguf") == {"status": "already_downloaded"}


async def test_already_downloaded_makes_no_request(
    manager: DownloadManager, origin: Origin, base_url: str, tmp_path: Path,
) -> None:
    dest = tmp_path / "models/127.0.0.1/m.gguf"
    dest.parent.mkdir(parents=True)
    dest.write_bytes(DATA)
    assert await manager.start(f"{base_url}/ok/m.gguf") == {"status": "already_downloaded"}
    assert origin.requests == []


async def test_concurrent_starts_share_one_job(
    manager: DownloadManager, origin: Origin, base_url: str,
) -> None:
    url = f"{base_url}/gated/m.gguf"
    first, second = await asyncio.gather(manager.start(url), manager.start(url))
    assert first["job_id"] == second["job_id"]
    await until_downloaded(manager, first["job_id"], HALF)
    assert (await manager.start(url))["job_id"] == first["job_id"]
    origin.gate.set()
    assert (await settle(manager, first["job_id"]))["status"] == "completed"
    assert origin.ranges("/gated/m.gguf") == [None]  # exactly one request reached the origin


# -- resume -----------------------------------------------------------------------------------


async def test_dropped_connection_is_resumed_with_range(
    manager: DownloadManager, origin: Origin, base_url: str, tmp_path: Path,
) -> None:
    job = await manager.start(f"{base_url}/drop/m.gguf")
    assert (await settle(manager, job["job_id"]))["status"] == "completed"
    assert origin.ranges("/drop/m.gguf") == [None, f"bytes={DROP_AT}-"]
    assert (tmp_path / "models/127.0.0.1/m.gguf").read_bytes() == DATA


async def test_failed_job_keeps_part_and_next_start_resumes(
    origin: Origin, base_url: str, tmp_path: Path,
) -> None:
    url, dest = f"{base_url}/drop/m.gguf", tmp_path / "models/127.0.0.1/m.gguf"
    manager = make_manager(tmp_path / "models", retry_delays=())  # no retries: the drop fails it
    try:
        job = await manager.start(url)
        failed = await settle(manager, job["job_id"])
        assert failed["status"] == "failed" and "closed" in failed["error"]
        assert dest.with_name("m.gguf.part").stat().st_size == DROP_AT and not dest.exists()

        again = await manager.start(url)
        assert again["job_id"] != job["job_id"]
        assert (await settle(manager, again["job_id"]))["status"] == "completed"
    finally:
        await manager.aclose()
    assert origin.ranges("/drop/m.gguf") == [None, f"bytes={DROP_AT}-"]
    assert dest.read_bytes() == DATA


async def test_server_ignoring_range_restarts_from_zero(
    manager: DownloadManager, origin: Origin, base_url: str, tmp_path: Path,
) -> None:
    dest = tmp_path / "models/127.0.0.1/m.gguf"
    dest.parent.mkdir(parents=True)
    dest.with_name("m.gguf.part").write_bytes(b"GGUF" + b"\xff" * 996)  # a stale, wrong prefix
    job = await manager.start(f"{base_url}/norange/m.gguf")
    assert (await settle(manager, job["job_id"]))["status"] == "completed"
    assert origin.ranges("/norange/m.gguf") == ["bytes=1000-"]
    assert dest.read_bytes() == DATA


async def test_aclose_pauses_and_a_new_manager_resumes(
    origin: Origin, base_url: str, tmp_path: Path,
) -> None:
    url, dest = f"{base_url}/gated/m.gguf", tmp_path / "models/127.0.0.1/m.gguf"
    manager = make_manager(tmp_path / "models")
    job = await manager.start(url)
    await until_downloaded(manager, job["job_id"], HALF)
    await manager.aclose()
    assert manager.status(job["job_id"])["status"] == "paused"
    assert dest.with_name("m.gguf.part").stat().st_size == HALF and not dest.exists()

    origin.gate.set()
    manager = make_manager(tmp_path / "models")
    try:
        again = await manager.start(url)
        assert (await settle(manager, again["job_id"]))["status"] == "completed"
    finally:
        await manager.aclose()
    assert origin.ranges("/gated/m.gguf") == [None, f"bytes={HALF}-"]
    assert dest.read_bytes() == DATA


# -- failures ---------------------------------------------------------------------------------


async def test_http_error_fails_the_job(
    manager: DownloadManager, origin: Origin, base_url: str, tmp_path: Path,
) -> None:
    job = await manager.start(f"{base_url}/missing/m.gguf")
    assert job["status"] == "failed"  # known before start answers: it awaits the first response
    assert "404" in job["error"] and "total_size_bytes" not in job
    assert manager.status(job["job_id"]) == job
    assert list((tmp_path / "models").rglob("*")) == [tmp_path / "models/127.0.0.1"]


async def test_non_gguf_content_fails_and_leaves_nothing(
    manager: DownloadManager, origin: Origin, base_url: str, tmp_path: Path,
) -> None:
    job = await manager.start(f"{base_url}/page/m.gguf")
    failed = await settle(manager, job["job_id"])
    assert failed["status"] == "failed" and "not a GGUF model file" in failed["error"]
    assert list((tmp_path / "models").rglob("*.gguf*")) == []
    assert origin.ranges("/page/m.gguf") == [None]  # not retried


def test_started_at_is_utc_with_milliseconds() -> None:
    from parlance.models.download_job import iso

    moment = datetime.fromisoformat("2025-10-03T17:33:23.496789+02:00")
    assert iso(moment) == "2025-10-03T15:33:23.496Z"
