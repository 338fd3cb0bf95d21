"""The download manager against a real HTTP origin on 127.0.0.1 (uvicorn in a thread).

The origin misbehaves on request: it drops the connection, ignores Range, answers 404, serves
a web page, redirects, or holds the second half of the file until the test opens a gate. It is
on loopback, so the manager must be told to allow 127.0.0.1; without that it is refused.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from parlance.core.errors import Overloaded
from parlance.models import download_job
from parlance.models.download_job import GGUF_MAGIC
from parlance.models.downloads import DownloadLimits, DownloadManager, destination_for
from tests.support.model_origin import (
    CHUNK,
    DATA,
    DROP_AT,
    HALF,
    Origin,
    OriginServer,
)

PATIENCE = 60.0  # a generous bound for every wait (the machine may be busy); nothing is timed
ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


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


ANY_DISK = DownloadLimits(min_free_bytes=0)  # the tests' files fit whatever disk runs them


def make_manager(models_dir: Path, retry_delays: tuple[float, ...] = (0.01, 0.01, 0.01),
                 allowed_hosts: tuple[str, ...] = ("127.0.0.1",),
                 limits: DownloadLimits = ANY_DISK) -> DownloadManager:
    # The origin is on loopback, which downloads may reach only when allow-listed.
    return DownloadManager(models_dir, retry_delays=retry_delays, allowed_hosts=allowed_hosts,
                           limits=limits)


@pytest.fixture
async def manager(tmp_path: Path) -> AsyncIterator[DownloadManager]:
    manager = make_manager(tmp_path / "models")
    yield manager
    await manager.aclose()


async def settle(manager: DownloadManager, job_id: str) -> dict:
    """The job's status once it is no longer downloading."""
    deadline = time.monotonic() + PATIENCE
    while (status := manager.status(job_id))["status"] == "downloading":
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.005)
    return status


async def until_downloaded(manager: DownloadManager, job_id: str, nbytes: int) -> dict:
    deadline = time.monotonic() + PATIENCE
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
    ("https://example.org/" + "m" * 295 + ".gguf", "too long"),  # `.part` too: 305 bytes
    ("https://example.org/" + "é" * 126 + ".gguf", "too long"),  # 252 bytes, 257 as .part
    ("https://" + "h" * 250 + ".org/m.gguf", "too long"),
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


# -- the address guard: client-named URLs reach public addresses only -------------------------


def port_of(base_url: str) -> int:
    return int(base_url.rsplit(":", 1)[1])


@pytest.mark.parametrize("host", [
    "127.0.0.1", "localhost", "2130706433", "0x7f.1", "0177.0.0.1", "127.1", "[::1]",
    "[::127.0.0.1]", "[::ffff:127.0.0.1]",
])
async def test_loopback_urls_are_refused_up_front(
    origin: Origin, base_url: str, tmp_path: Path, host: str,
) -> None:
    manager = make_manager(tmp_path / "models", allowed_hosts=())
    with pytest.raises(ValueError, match="non-public address.*--download-allow-host"):
        await manager.start(f"http://{host}:{port_of(base_url)}/ok/m.gguf")
    await manager.aclose()
    assert origin.requests == [] and not (tmp_path / "models").exists()


async def test_cloud_metadata_address_is_refused(manager: DownloadManager) -> None:
    with pytest.raises(ValueError, match="non-public address"):
        await manager.start("http://169.254.169.254/latest/meta-data/m.gguf")


async def test_redirects_follow_within_the_allow_list(
    manager: DownloadManager, origin: Origin, base_url: str,
) -> None:
    """Control for the tests below: a redirect to an allowed host is followed."""
    job = await manager.start(f"{base_url}/redirect/m.gguf?to={base_url}/ok/m.gguf")
    assert (await settle(manager, job["job_id"]))["status"] == "completed"
    assert [path for path, _ in origin.requests] == ["/redirect/m.gguf", "/ok/m.gguf"]


@pytest.mark.parametrize("target", ["localhost", "2130706433", "[::1]"])
async def test_a_redirect_to_loopback_is_refused_when_connecting(
    manager: DownloadManager, origin: Origin, base_url: str, target: str,
) -> None:
    """127.0.0.1 is allowed, so the first hop passes; the redirect names loopback
    otherwise, and its connection is refused. The job says nothing of what is there."""
    to = f"http://{target}:{port_of(base_url)}/ok/m.gguf"
    job = await manager.start(f"{base_url}/redirect/m.gguf?to={to}")
    failed = await settle(manager, job["job_id"])
    assert failed["status"] == "failed"
    assert failed["error"] == "download failed: could not connect to the server"
    assert failed["downloaded_bytes"] == 0 and "total_size_bytes" not in failed
    assert [path for path, _ in origin.requests] == ["/redirect/m.gguf"]


async def test_a_refused_connection_reads_like_a_closed_port(
    manager: DownloadManager, origin: Origin, base_url: str,
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as unused:
        closed = f"http://127.0.0.1:{unused.getsockname()[1]}/m.gguf"
    refused = f"{base_url}/redirect/m.gguf?to=http://localhost:{port_of(base_url)}/ok/m.gguf"
    errors = []
    for url in (closed, refused):
        job = await manager.start(url)
        errors.append((await settle(manager, job["job_id"]))["error"])
    assert errors[0] == errors[1] == "download failed: could not connect to the server"


@pytest.mark.parametrize("to", ["ftp://127.0.0.1/m.gguf", "file:///etc/passwd"])
async def test_a_redirect_to_another_scheme_is_refused(
    manager: DownloadManager, origin: Origin, base_url: str, to: str,
) -> None:
    job = await manager.start(f"{base_url}/redirect/m.gguf?to={to}")
    failed = await settle(manager, job["job_id"])
    assert failed["status"] == "failed" and "not http(s)" in failed["error"]


async def test_a_non_gguf_body_is_never_described(
    manager: DownloadManager, origin: Origin, base_url: str,
) -> None:
    """Neither its first bytes nor its size: the URL may be an internal page."""
    job = await manager.start(f"{base_url}/page/m.gguf")
    failed = await settle(manager, job["job_id"])
    for status in (job, failed):
        assert "total_size_bytes" not in status and status["downloaded_bytes"] == 0
        assert "<!doctype" not in str(status) and "Model card" not in str(status)


@pytest.mark.parametrize("answer", [
    b"SSH-2.0-OpenSSH_9.6 internal-secret\r\n",  # no web server at all
    b"HTTP/1.1 404 internal-secret\r\nContent-Length: 0\r\n\r\n",  # the reason phrase
    b"HTTP/1.1 206 Partial\r\nContent-Range: internal-secret\r\nContent-Length: 0\r\n\r\n",
])
async def test_what_a_server_sends_is_never_quoted(
    manager: DownloadManager, tmp_path: Path, answer: bytes,
) -> None:
    """The URL may name an internal service: nothing it sends reaches the job's error."""
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    part = tmp_path / "models/127.0.0.1/m.gguf.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(GGUF_MAGIC)  # a resume: the request asks for a Range
    server = await asyncio.start_server(reply, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        job = await manager.start(f"http://127.0.0.1:{port}/m.gguf")
        failed = await settle(manager, job["job_id"])
    assert failed["status"] == "failed" and "secret" not in failed["error"]


# -- limits: jobs at once, a deadline, free disk, followers -----------------------------------


async def test_jobs_beyond_the_limit_are_refused_and_joining_one_is_not(
    origin: Origin, base_url: str, tmp_path: Path,
) -> None:
    manager = make_manager(tmp_path / "models", limits=DownloadLimits(max_jobs=2))
    try:
        held = [await manager.start(f"{base_url}/gated/m{i}.gguf") for i in range(2)]
        with pytest.raises(Overloaded) as caught:
            await manager.start(f"{base_url}/gated/third.gguf")
        assert "--download-max-jobs" in caught.value.message
        assert origin.hits["/gated/third.gguf"] == 0  # refused before reaching out
        assert (await manager.start(f"{base_url}/gated/m0.gguf"))["job_id"] == held[0]["job_id"]
        origin.gate.set()
        for job in held:
            assert (await settle(manager, job["job_id"]))["status"] == "completed"
        third = await manager.start(f"{base_url}/gated/third.gguf")  # room again
        assert (await settle(manager, third["job_id"]))["status"] == "completed"
    finally:
        await manager.aclose()


async def test_a_finished_job_frees_its_slot_in_the_step_its_status_changes(
    origin: Origin, base_url: str, tmp_path: Path,
) -> None:
    manager = make_manager(tmp_path / "models", limits=DownloadLimits(max_jobs=1))
    try:
        first = await manager.start(f"{base_url}/gated/first.gguf")
        origin.gate.set()
        await manager.job(first["job_id"]).ended.wait()  # wakes before any done callback
        assert manager.status(first["job_id"])["status"] == "completed"
        second = await manager.start(f"{base_url}/gated/second.gguf")
        assert (await settle(manager, second["job_id"]))["status"] == "completed"
    finally:
        await manager.aclose()


async def test_a_job_past_its_deadline_fails_and_a_new_one_resumes_it(
    origin: Origin, base_url: str, tmp_path: Path,
) -> None:
    url, part = f"{base_url}/gated/m.gguf", tmp_path / "models/127.0.0.1/m.gguf.part"
    manager = make_manager(tmp_path / "models", limits=DownloadLimits(timeout=1.0))
    try:
        job = await manager.start(url)
        failed = await settle(manager, job["job_id"])  # the origin holds its second half
        assert failed["status"] == "failed" and "--download-timeout" in failed["error"]
        assert part.stat().st_size == HALF
        origin.gate.set()
        again = await manager.start(url)
        assert (await settle(manager, again["job_id"]))["status"] == "completed"
    finally:
        await manager.aclose()
    assert origin.ranges("/gated/m.gguf") == [None, f"bytes={HALF}-"]


class Disk:
    """`shutil.disk_usage` as the job sees it: `free` bytes, less what it wrote."""

    def __init__(self, free: int, part: Path) -> None:
        self.free, self.part = free, part

    def __call__(self, path: object) -> object:
        written = self.part.stat().st_size if self.part.exists() else 0
        return type("Usage", (), {"free": self.free - written})()


async def test_a_file_larger_than_the_free_disk_is_refused_before_it_is_written(
    base_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    part = tmp_path / "models/127.0.0.1/m.gguf.part"
    monkeypatch.setattr(download_job.shutil, "disk_usage", Disk(len(DATA) + 1000, part))
    manager = make_manager(tmp_path / "models", limits=DownloadLimits(min_free_bytes=2000))
    try:
        job = await manager.start(f"{base_url}/ok/m.gguf")
        failed = await settle(manager, job["job_id"])
    finally:
        await manager.aclose()
    assert failed["status"] == "failed" and "not enough free disk" in failed["error"]
    assert "--download-min-free-mb" in failed["error"]
    assert not part.exists() and ggufs(tmp_path) == []
    assert manager.job(job["job_id"]).failed_here  # the server's condition, not the URL's


async def test_a_disk_that_fills_while_writing_stops_the_job(
    origin: Origin, base_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    part = tmp_path / "models/127.0.0.1/m.gguf.part"
    disk = Disk(10 * len(DATA), part)
    monkeypatch.setattr(download_job.shutil, "disk_usage", disk)
    monkeypatch.setattr(download_job, "DISK_CHECK_EVERY", CHUNK)
    manager = make_manager(tmp_path / "models", limits=DownloadLimits(min_free_bytes=1000))
    try:
        job = await manager.start(f"{base_url}/gated/m.gguf")  # room enough when it starts
        await until_downloaded(manager, job["job_id"], HALF)
        disk.free = HALF + 500  # something else filled the disk meanwhile
        origin.gate.set()
        failed = await settle(manager, job["job_id"])
    finally:
        await manager.aclose()
    assert failed["status"] == "failed" and "not enough free disk" in failed["error"]
    assert not part.exists() and ggufs(tmp_path) == []


async def test_a_file_of_unknown_size_stops_before_the_reserve_not_64_mib_past_it(
    base_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 39: the free disk was looked at every 64 MiB, so a download whose size was
    not announced could fill the disk to 0 bytes free before the first look."""
    part = tmp_path / "models/127.0.0.1/m.gguf.part"
    room = HALF
    monkeypatch.setattr(download_job.shutil, "disk_usage", Disk(room + 1000, part))
    manager = make_manager(tmp_path / "models", limits=DownloadLimits(min_free_bytes=1000))
    try:
        job = await manager.start(f"{base_url}/unsized/m.gguf")
        failed = await settle(manager, job["job_id"])
    finally:
        await manager.aclose()
    assert failed["status"] == "failed" and "not enough free disk" in failed["error"]
    assert manager.job(job["job_id"]).downloaded <= room  # the reserve was never touched
    assert not part.exists() and ggufs(tmp_path) == []


async def test_a_followed_job_stops_when_its_last_follower_leaves(
    origin: Origin, base_url: str, tmp_path: Path,
) -> None:
    """As Ollama's pulls: no cancel call, the download stops once nobody follows it;
    its `.part` stays for the next pull."""
    manager = make_manager(tmp_path / "models")
    url = f"{base_url}/gated/m.gguf"
    try:
        started = await manager.start(url, followed=True)
        job = manager.job(started["job_id"])
        assert job is not None
        first, second = manager.follow(job), manager.follow(job)
        await until_downloaded(manager, job.id, HALF)
        first()
        first()  # leaving twice counts once
        await asyncio.sleep(0.05)
        assert job.state == "downloading"  # one follower is still there
        second()
        assert (await settle(manager, job.id))["status"] == "paused"
        assert (tmp_path / "models/127.0.0.1/m.gguf.part").stat().st_size == HALF
        # asked for without following it (LM Studio's endpoint): it runs to its end
        again = await manager.start(url, followed=True)
        await manager.start(url)
        manager.follow(manager.job(again["job_id"]))()
        origin.gate.set()
        assert (await settle(manager, again["job_id"]))["status"] == "completed"
    finally:
        await manager.aclose()
