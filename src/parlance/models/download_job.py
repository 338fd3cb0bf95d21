"""One GGUF download: fetch into `<dest>.part`, resume it with Range, then rename it into place.

The `.part` suffix keeps an unfinished file out of model scans (they take `*.gguf`), and the
final `os.replace` makes the model appear whole or not at all. A `.part` outlives failures and
cancellation so the next attempt only fetches what is missing.

A client names the URL, so the job tells it nothing about what it reached unless it is a GGUF
file: no size or progress before the first bytes prove it, and failures in fixed words (never
the server's bytes, headers or socket errors; a refused connection reads like a closed port).

A job has a deadline (its `.part` stays for a resume) and leaves `min_free_bytes` of the disk
free: a file announced larger than the room left is refused before it is written, and one
that fills the disk while it is written is stopped and its `.part` deleted.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import secrets
import shutil
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2

from parlance.net.guard import refused_at_connect

log = logging.getLogger("parlance.models")

GGUF_MAGIC = b"GGUF"
RATE_WINDOW = 5.0  # seconds of recent transfer behind bytes_per_second: a stall shows soon
PART = ".part"  # the suffix of a file being downloaded
# The free disk is looked at again before a write would pass what the last look left
# above the reserve, and after this many bytes at most (something else may write too).
DISK_CHECK_EVERY = 64 * 2**20
# A look allows a job this share of the room it saw, so the jobs that may run at once
# (four by default: --download-max-jobs) together never write past the reserve.
SHARERS = 4
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


class DownloadError(Exception):
    """A failure reported as the job's `error`; the `.part` stays for a later resume."""


class NotGGUF(DownloadError):
    """The bytes are no GGUF model (a web page, say): the `.part` is deleted, not resumed."""


class NoRoom(DownloadError):
    """The file does not fit the disk this server keeps free: the `.part` is deleted."""


class _Retry(Exception):
    """The transfer ended early or must start over: worth another attempt after a pause."""


CONNECT_FAILED = "could not connect to the server"


def _reason(exc: Exception) -> str:
    """A transport failure in fixed words: its own text may carry what the server sent."""
    if isinstance(exc, _Retry):
        return str(exc)
    if isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout):
        return CONNECT_FAILED
    if isinstance(exc, httpx2.TimeoutException):
        return "the server stopped sending"
    if isinstance(exc, httpx2.RemoteProtocolError):
        return "the server's answer was not valid HTTP, or the connection closed early"
    return "the connection failed"


def iso(moment: datetime) -> str:
    """LM Studio's timestamp form: UTC, milliseconds, `Z`."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class RateMeter:
    """Bytes per second over the last `window` seconds of the current attempt."""

    def __init__(self, window: float = RATE_WINDOW) -> None:
        self._window = window
        self._samples: deque[tuple[float, int]] = deque()
        self._in_window = 0
        self._since = time.monotonic()

    def restart(self) -> None:
        self._samples.clear()
        self._in_window = 0
        self._since = time.monotonic()

    def add(self, nbytes: int) -> None:
        self._samples.append((time.monotonic(), nbytes))
        self._in_window += nbytes

    def rate(self) -> float:
        now = time.monotonic()
        while self._samples and self._samples[0][0] < now - self._window:
            self._in_window -= self._samples.popleft()[1]
        span = min(self._window, now - self._since)
        return self._in_window / span if span > 0 else 0.0


class DownloadJob:
    """The state of one download and the coroutine (`run`) that performs it."""

    def __init__(self, url: str, dest: Path, client_factory: Callable[[], httpx2.AsyncClient],
                 retry_delays: Sequence[float], *, timeout: float | None = None,
                 min_free_bytes: int = 0) -> None:
        self.id = f"job_{secrets.token_hex(5)}"
        self.url = url
        self.dest = dest
        self.part = dest.with_name(dest.name + PART)
        self.state = "downloading"
        self.total: int | None = None
        self.downloaded = 0
        self.error: str | None = None
        self.started_at = datetime.now(UTC)
        self.completed_at: datetime | None = None
        # Set once the first bytes proved a GGUF file (or the job failed), so the first status
        # knows the size.
        self.headers_seen = asyncio.Event()
        self.ended = asyncio.Event()  # completed, failed or paused: followers stop waiting
        self.failed_here = False  # the failure is this server's (writing the file), not the URL's
        self.no_room = False  # ... because the disk keeps no room for the file
        self.followers = 0  # pulls following it now (`DownloadManager.follow`)
        self.unfollowed = False  # someone asked for it without following it: it runs on
        self._timeout = timeout
        self._min_free = min_free_bytes
        self._client_factory = client_factory
        self._retry_delays = tuple(retry_delays)
        self._rate = RateMeter()
        self._received = 0  # bytes of the current attempt: progress resets the retry budget
        self._magic_ok = False  # the file starts with GGUF_MAGIC: its size may be told

    def status(self) -> dict[str, Any]:
        """The LM Studio download status object of this job."""
        out: dict[str, Any] = {"job_id": self.id, "status": self.state}
        shown = self._magic_ok  # nothing about a body that may be no model file at all
        if self.total is not None and shown:
            out["total_size_bytes"] = self.total
        out["downloaded_bytes"] = self.downloaded if shown else 0
        out["started_at"] = iso(self.started_at)
        if self.state == "downloading":
            rate = self._rate.rate() if shown else 0.0
            out["bytes_per_second"] = round(rate)
            if rate > 0 and self.total is not None:
                left = max(self.total - self.downloaded, 0) / rate
                out["estimated_completion"] = iso(datetime.now(UTC) + timedelta(seconds=left))
        elif self.state == "completed" and self.completed_at is not None:
            out["completed_at"] = iso(self.completed_at)
        elif self.state == "failed":
            out["error"] = self.error
        return out

    async def run(self) -> None:
        """Download to the end. Failures become the `failed` state; cancellation `paused`."""
        try:
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            async with asyncio.timeout(self._timeout):
                async with self._client_factory() as client:
                    await self._fetch_with_retries(client)
            await asyncio.to_thread(self._finish)
            self.completed_at = datetime.now(UTC)
            self.total = self.downloaded
            self.state = "completed"
        except asyncio.CancelledError:
            self.state = "paused"
            raise
        except TimeoutError:
            self._fail(f"download failed: it took longer than {self._timeout:g} seconds "
                       "(parlance serve --download-timeout); asking again resumes it")
        except NotGGUF as exc:
            self.part.unlink(missing_ok=True)
            self._fail(str(exc))
        except NoRoom as exc:
            self.part.unlink(missing_ok=True)
            self.failed_here = self.no_room = True
            self._fail(str(exc))
        except DownloadError as exc:
            self._fail(str(exc))
        except httpx2.TooManyRedirects:
            self._fail("download failed: too many redirects")
        except OSError as exc:  # the models directory, not the network (httpx2 wraps those)
            if exc.errno == errno.ENOSPC:
                self.part.unlink(missing_ok=True)
            self.failed_here = True
            self._fail(f"download failed: cannot write the model file ({exc.strerror})")
        except Exception:  # a background task: any error must end the job
            log.exception("download %s failed", self.id)
            self.failed_here = True
            self._fail("download failed")
        finally:
            self.headers_seen.set()
            self.ended.set()

    def _fail(self, message: str) -> None:
        self.error = message
        self.state = "failed"

    async def _fetch_with_retries(self, client: httpx2.AsyncClient) -> None:
        failures = 0
        while True:
            try:
                await self._fetch_once(client)
                return
            except httpx2.UnsupportedProtocol as exc:  # a redirect to ftp:, file:, ...
                raise DownloadError("download failed: the server redirected to a URL that "
                                    "is not http(s)") from exc
            except (httpx2.TransportError, _Retry) as exc:
                if refused_at_connect(exc):  # the same words as a closed port: no probing
                    raise DownloadError(f"download failed: {CONNECT_FAILED}") from exc
                if self._received:  # the link works, it only dropped: a fresh retry budget
                    failures = 0
                if failures >= len(self._retry_delays):
                    raise DownloadError(f"download failed: {_reason(exc)}") from exc
                await asyncio.sleep(self._retry_delays[failures])
                failures += 1

    async def _fetch_once(self, client: httpx2.AsyncClient) -> None:
        offset = self.part.stat().st_size if self.part.exists() else 0
        headers = {"Accept-Encoding": "identity"}  # byte offsets must be offsets of the file
        if offset:
            headers["Range"] = f"bytes={offset}-"
        self._received = 0
        async with client.stream("GET", self.url, headers=headers) as response:
            offset = self._accept(response, offset)
            self.downloaded = offset
            self._rate.restart()
            if not offset:  # a fresh start: these bytes must prove themselves again
                self._magic_ok = False
            if self.total is not None:
                self._check_room(self.total - offset)
            allowance = 0  # bytes this job may write before it looks at the disk again
            # Buffered appends to a local file: cheap enough to do on the event loop.
            with open(self.part, "ab" if offset else "wb") as out:  # noqa: ASYNC230
                async for chunk in response.aiter_bytes():
                    if len(chunk) > allowance:
                        out.flush()  # the disk's figure counts what was written
                        room = self._check_room(len(chunk))
                        allowance = min(room // SHARERS, DISK_CHECK_EVERY)
                    out.write(chunk)
                    allowance -= len(chunk)
                    self.downloaded += len(chunk)
                    self._received += len(chunk)
                    self._rate.add(len(chunk))
                    if not self._magic_ok and self.downloaded >= len(GGUF_MAGIC):
                        out.flush()
                        self._check_magic()
                        self.headers_seen.set()
        if self.total is not None and self.downloaded != self.total:
            if self.downloaded > self.total:
                self.part.unlink(missing_ok=True)
                raise _Retry("the server sent more bytes than it announced; restarting")
            raise _Retry("the connection closed before the end of the file")

    def _accept(self, response: httpx2.Response, offset: int) -> int:
        """Where the body starts in the file; learns the total size or refuses the response."""
        code = response.status_code
        if code == 416 and offset:  # the .part is no proper prefix of the file (any more)
            self.part.unlink(missing_ok=True)
            raise _Retry("the server refused to resume the partial file; restarting")
        if code not in (200, 206):  # the code only: the reason phrase is the server's text
            raise DownloadError(f"the server answered HTTP {code} for {self.url}")
        if code == 200:  # a fresh download, or a server that ignores Range: start from zero
            length = response.headers.get("content-length", "")
            self._learn_total(int(length) if length.isdigit() else None)
            return 0
        match = _CONTENT_RANGE.fullmatch(response.headers.get("content-range", "").strip())
        if not match or int(match[1]) != offset or int(match[2]) + 1 != int(match[3]):
            self.part.unlink(missing_ok=True)
            raise _Retry("the server answered the Range request with an unexpected "
                         "Content-Range; restarting")
        self._learn_total(int(match[3]))
        return offset

    def _learn_total(self, total: int | None) -> None:
        if self.total is not None and total is not None and total != self.total:
            self.total = total
            self.part.unlink(missing_ok=True)
            raise _Retry("the file changed size on the server; restarting")
        self.total = total

    def _check_room(self, needed: int) -> int:
        """`needed` more bytes must leave `min_free_bytes` of the disk free; the bytes
        that may be written before the reserve is reached, as the disk is now."""
        free = shutil.disk_usage(self.dest.parent).free
        if free - needed < self._min_free:
            raise NoRoom(f"download failed: not enough free disk space for the model file "
                         f"(it needs {needed} more bytes, {free} are free and the server "
                         f"keeps {self._min_free} free: parlance serve --download-min-free-mb)")
        return free - self._min_free

    def _check_magic(self) -> None:
        with open(self.part, "rb") as part:
            head = part.read(len(GGUF_MAGIC))
        if head != GGUF_MAGIC:  # what it starts with instead is not the client's business
            raise NotGGUF(f"{self.url} is not a GGUF model file (is the link a web page "
                          "rather than the file itself?)")
        self._magic_ok = True

    def _finish(self) -> None:
        """Durably move the complete `.part` to its final name (runs in a worker thread)."""
        self._check_magic()  # also catches files shorter than the magic
        with open(self.part, "rb+") as part:
            os.fsync(part.fileno())
        os.replace(self.part, self.dest)
        try:  # make the rename itself durable; directories cannot be opened on Windows
            fd = os.open(self.dest.parent, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
