"""Downloads of GGUF model files into the models directory (LM Studio's download endpoints).

Jobs run as asyncio tasks in the server's loop. `start` is single-flight per destination, so two
requests for one file never write the same `.part`; the engine itself is never involved.

A client names the URL, so it may reach only public addresses unless the operator allow-listed
its host (`parlance.net.guard`): checked when the download is asked for (a clear 400), and again
on every connection, redirects included (the job then fails without saying what it reached).

Bounded (`DownloadLimits`): at most `max_jobs` run at once (one more is refused as overloaded),
each within `timeout` seconds (its `.part` stays for a later resume), and never past
`min_free_bytes` of free disk, checked against the announced size and while writing. Neither
API has a cancel call: a job an Ollama pull started ends when every pull following it has
left, as Ollama's own downloads do; one LM Studio's endpoint started runs until its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx2

from parlance.core.errors import Overloaded
from parlance.models.download_job import PART, DownloadJob
from parlance.models.hub import DEFAULT_CATALOG, HubName, catalog_host, resolve
from parlance.net.guard import NON_PUBLIC, RefusedURL, check_url, public_only_client

HF_HOSTS = frozenset({"huggingface.co", "www.huggingface.co", "hf.co"})
HEADERS_WAIT = 10.0  # how long `start` waits for the first response before answering anyway
RETRY_DELAYS = (1.0, 2.0, 4.0)  # pauses before each resume of a dropped connection
# What Linux, macOS and Windows file systems take: bytes of one name, and of a path.
NAME_MAX = 255
PATH_MAX = 4096


@dataclass(frozen=True, slots=True)
class DownloadLimits:
    max_jobs: int = 4  # downloads running at once
    timeout: float = 6 * 3600.0  # seconds one job may take (a 100 GB file at 5 MB/s)
    min_free_bytes: int = 2**30  # free disk a download always leaves


def download_client(allowed_hosts: tuple[str, ...]) -> httpx2.AsyncClient:
    """Follows redirects; every hop connects through the address guard."""
    return public_only_client(allowed_hosts, timeout=httpx2.Timeout(30, read=60),
                              follow_redirects=True)


def destination_for(models_dir: Path, url: str, hub_hosts: frozenset[str] = HF_HOSTS) -> Path:
    """Where `url` is saved: `<owner>/<repo>/<file>.gguf` for Hugging Face (or the
    catalog in `hub_hosts`), else `<host>/<file>`.

    Raises ValueError for anything but an http(s) link straight to a `.gguf` file.
    """
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http:// or https:// URL, got {url!r}")
    segments = [unquote(s) for s in parts.path.split("/") if s]
    name = segments[-1] if segments else ""
    if len(name) <= len(".gguf") or not name.lower().endswith(".gguf"):
        raise ValueError(f"a direct link to a .gguf file is needed, got {url!r}")
    name = name[: -len(".gguf")] + ".gguf"  # model scans match `*.gguf` case-sensitively
    if parts.hostname in hub_hosts:
        if len(segments) < 5 or segments[2] != "resolve":
            raise ValueError("a Hugging Face link must have the form "
                             f"https://huggingface.co/<owner>/<repo>/resolve/<revision>/<file>.gguf,"
                             f" got {url!r}")
        dirs = segments[:2]
    else:
        dirs = [parts.hostname]
    for component in (*dirs, name):
        if component in (".", "..") or any(c in component for c in "/\\\0"):
            raise ValueError(f"unsafe path component {component!r} in {url!r}")
        # the file is written as `<name>.part` first; a longer name no file system takes
        if len(component.encode("utf-8", "surrogateescape")) + len(PART) > NAME_MAX:
            raise ValueError(f"the name {component!r} is too long for a file (at most "
                             f"{NAME_MAX - len(PART)} bytes)")
    dest = models_dir.joinpath(*dirs, name)
    if len(os.fsencode(dest)) + len(PART) >= PATH_MAX:
        raise ValueError(f"the path for {url!r} in the models directory is too long")
    return dest


class DownloadManager:
    """Starts downloads, answers their status, and cancels them on shutdown."""

    def __init__(self, models_dir: Path, *, allowed_hosts: tuple[str, ...] = (),
                 retry_delays: Sequence[float] = RETRY_DELAYS,
                 limits: DownloadLimits = DownloadLimits(),
                 catalog: str = DEFAULT_CATALOG) -> None:
        """`allowed_hosts`: non-public hosts downloads may reach all the same;
        `catalog`: where `owner/repo[:QUANT]` names are looked up (`models.hub`)."""
        self.models_dir = Path(models_dir)
        self.catalog = catalog.rstrip("/")
        self._hub_hosts = HF_HOSTS | {catalog_host(catalog)}
        self.limits = limits
        self._allowed_hosts = allowed_hosts
        self._client_factory = functools.partial(download_client, allowed_hosts)
        self._retry_delays = tuple(retry_delays)
        self._jobs: dict[str, DownloadJob] = {}
        self._running: dict[Path, DownloadJob] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}  # by job id, while it runs

    async def start(self, url: str, *, followed: bool = False) -> dict[str, Any]:
        """Start (or join) the download of `url`; answers once the first response is in.
        `followed`: the job ends when the last of its followers leaves (`follow`), unless
        a caller that does not follow it also asked for it.

        Raises ValueError for a URL that is not an http(s) link to a `.gguf` file, or that
        reaches a non-public address; Overloaded when `max_jobs` already run.
        """
        dest = self.destination(url)
        try:
            await check_url(url, self._allowed_hosts)
        except RefusedURL as exc:
            if str(exc) != NON_PUBLIC:
                raise
            raise RefusedURL(f"{exc} Downloads may only reach public addresses unless the "
                             "server's operator allow-lists the host (parlance serve "
                             "--download-allow-host).") from exc
        if dest.exists():
            return {"status": "already_downloaded"}
        job = self._running.get(dest)
        if job is None:
            if len(self._running) >= self.limits.max_jobs:
                raise Overloaded(f"{self.limits.max_jobs} downloads are running already "
                                 "(parlance serve --download-max-jobs); retry once one has "
                                 "finished.", retry_after=30.0)
            job = DownloadJob(url, dest, self._client_factory, self._retry_delays,
                              timeout=self.limits.timeout,
                              min_free_bytes=self.limits.min_free_bytes)
            self._jobs[job.id] = job
            self._running[dest] = job
            task = asyncio.create_task(self._run(job), name=f"download {job.id}")
            self._tasks[job.id] = task
            # a task cancelled before its first step never enters `_run`'s finally
            task.add_done_callback(lambda _: self._release(job))
        job.unfollowed = job.unfollowed or not followed
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(job.headers_seen.wait(), HEADERS_WAIT)
        return job.status()

    def destination(self, url: str) -> Path:
        """Where `url` is saved (`destination_for`; a catalog's files as Hugging Face's)."""
        return destination_for(self.models_dir, url, self._hub_hosts)

    async def link_for(self, name: HubName) -> str:
        """The download link of the file catalog name `name` means (`models.hub`).
        Raises ValueError when the catalog's address is refused, InvalidRequest when
        the repository has no such file, Unavailable when the catalog fails."""
        try:
            await check_url(f"{self.catalog}/api/models/{name.repo}", self._allowed_hosts)
        except RefusedURL as exc:
            raise RefusedURL(f"The model catalog {self.catalog} may not be reached: {exc}"
                             + (" (parlance serve --download-allow-host)"
                                if str(exc) == NON_PUBLIC else "")) from exc
        async with self._client_factory() as client:
            return await resolve(name, self.catalog, client)

    def job(self, job_id: str) -> DownloadJob | None:
        """The job itself, for a caller that follows its progress (Ollama's pull)."""
        return self._jobs.get(job_id)

    def follow(self, job: DownloadJob) -> Callable[[], None]:
        """Count one more follower of `job`; call what this returns when it leaves. A job
        only followers asked for is stopped (paused, its `.part` kept) once none is left."""
        job.followers += 1
        left = False

        def leave() -> None:
            nonlocal left
            if left:
                return
            left = True
            job.followers -= 1
            task = self._tasks.get(job.id)
            if not job.followers and not job.unfollowed and task is not None:
                task.cancel()

        return leave

    def status(self, job_id: str) -> dict[str, Any] | None:
        """The job's LM Studio status object, or None for an unknown id."""
        job = self._jobs.get(job_id)
        return None if job is None else job.status()

    async def aclose(self) -> None:
        """Cancel running downloads; their `.part` files stay for a later resume."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, job: DownloadJob) -> None:
        """Run `job`; its slot is free in the same step its status stops saying
        `downloading` (a done callback would free it a loop turn later, so a client that
        saw `completed` and asked for the next file could be refused as overloaded)."""
        try:
            await job.run()
        finally:
            self._release(job)

    def _release(self, job: DownloadJob) -> None:
        self._tasks.pop(job.id, None)
        if self._running.get(job.dest) is job:
            del self._running[job.dest]
