"""Ollama's model endpoints: `GET /api/tags`, `POST /api/show`, `GET /api/ps`,
`GET /api/version`, `POST /api/pull`, `DELETE /api/delete`, `POST /api/copy`. Errors
use Ollama's envelope (`{"error": …}`, `model 'x' not found` with 404). The policy is
the models layer's: what a model's facts are (`models/facts.py`), what may be deleted
(`models/removal.py`), what a download is answered (`models/download_policy.py`).

- pull: a catalog name (`owner/repo[:QUANT]`, `hf.co/owner/repo[:QUANT]`: `models.hub`,
  the catalog `--catalog-url`) is resolved to one GGUF file's link, then pulled as
  a link is; a direct http(s) link to a .gguf file is downloaded into the models directory
  by the download manager LM Studio's download endpoint uses (single flight, resumable,
  address-guarded), its progress streamed as Ollama's NDJSON lines; a name this server
  already serves is there already (`success`). Any other name would need Ollama's
  registry, which Parlance does not reach: a 400 that says what to pull instead. As in
  Ollama, a download stops (its `.part` kept) once every pull following it has left;
  pulling it again resumes it, or follows the same job while it runs.
- copy: one more name for a model (`models.served.ServedModels.copy`), kept in
  `<data dir>/model_copies.json` (`models/copies.py`) so it outlives a restart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from parlance.core.errors import ModelNotFound, ServerShuttingDown
from parlance.dialects.base import Frame
from parlance.dialects.ollama import models as shapes
from parlance.dialects.ollama import render_error
from parlance.dialects.ollama.errors import error_line
from parlance.models.copies import FILE_NAME, CopyFile
from parlance.models.download_job import DownloadJob
from parlance.models.download_policy import (
    failure,
    link_for,
    no_models_dir,
    served_name,
    start_download,
)
from parlance.models.downloads import DownloadManager
from parlance.models.facts import facts_of
from parlance.models.hub import hub_name
from parlance.models.registry import tagged
from parlance.models.removal import delete_model
from parlance.models.served import ServedModels
from parlance.server.body.reader import read_wire
from parlance.server.calls.streaming import EventStreamResponse
from parlance.server.calls.supervision import Supervisor
from parlance.server.endpoints.answering import answering
from parlance.server.http.access_log import access_record
from parlance.server.settings import ServerSettings

PROGRESS_EVERY = 0.5  # seconds between pull progress lines while bytes arrive


class OllamaModels:
    def __init__(self, models: ServedModels, settings: ServerSettings,
                 downloads: DownloadManager | None) -> None:
        self.models = models
        self.settings = settings
        self.downloads = downloads
        self.copy_file = CopyFile(settings.data_dir / FILE_NAME if settings.data_dir else None)
        models.restore_copies(self.copy_file.load())
        keys = settings.api_keys
        self.tags = answering(self._tags, keys, render_error)
        self.show = answering(self._show, keys, render_error)
        self.ps = answering(self._ps, keys, render_error)
        self.version = answering(self._version, keys, render_error)
        self.pull = answering(self._pull, keys, render_error)
        self.delete = answering(self._delete, keys, render_error)
        self.copy = answering(self._copy, keys, render_error)

    # -- listings -----------------------------------------------------------------

    async def _tags(self, request: Request) -> dict[str, Any]:
        """Every model a request may name, then every name made by copy, each shown
        with a tag."""
        specs = self.models.available()
        by_id = {spec.id: spec for spec in specs}
        named = [(tagged(spec.id), spec) for spec in specs]
        named += [(tagged(name), by_id[target]) for name, target in self.models.copies.items()
                  if target in by_id]
        created = {m.spec.id: m.created for m in self.models}

        def entries() -> list[dict[str, Any]]:
            return [shapes.tag_entry(shown, facts_of(spec, created.get(spec.id)))
                    for shown, spec in named]

        return {"models": await asyncio.to_thread(entries)}

    async def _ps(self, request: Request) -> dict[str, Any]:
        loaded = list(self.models)
        facts = await asyncio.to_thread(lambda: [facts_of(m.spec) for m in loaded])
        now = time.time_ns()
        rows = []
        for model, found in zip(loaded, facts, strict=True):
            expires_at = self.models.expires_at(model)
            rows.append((expires_at, shapes.ps_entry(
                tagged(model.spec.id), found, model.size_bytes,
                shapes.expiry(expires_at, now), model.engine.context_length)))
        # As Ollama orders them: the longest time left first (never: first of all).
        rows.sort(key=lambda row: float("inf") if row[0] is None else row[0], reverse=True)
        return {"models": [entry for _, entry in rows]}

    async def _show(self, request: Request) -> dict[str, Any]:
        body = await read_wire(request, self.settings.max_body_bytes, shapes.ShowRequest)
        name = body.target
        spec = self.models.spec(name)
        loaded = next((m for m in self.models if m.spec.id == spec.id), None)
        # (clients show every listed model: without `verbose`, the cached header)
        facts = await asyncio.to_thread(facts_of, spec, loaded.created if loaded else None,
                                        whole_arrays=body.verbose)
        return shapes.show(tagged(name), facts, body.verbose)

    async def _version(self, request: Request) -> dict[str, Any]:
        return {"version": shapes.OLLAMA_VERSION}

    # -- copy and delete ----------------------------------------------------------

    async def _copy(self, request: Request) -> Response:
        body = await read_wire(request, self.settings.max_body_bytes, shapes.CopyRequest)
        self.models.copy(*body.checked())
        self.copy_file.save(self.models.copies)
        return Response(status_code=200)

    async def _delete(self, request: Request) -> Response:
        body = await read_wire(request, self.settings.max_body_bytes, shapes.DeleteRequest)
        if await delete_model(self.models, body.target, self.settings.models_dir):
            self.copy_file.save(self.models.copies)
        return Response(status_code=200)

    # -- pull ---------------------------------------------------------------------

    async def _pull(self, request: Request) -> Any:
        body = await read_wire(request, self.settings.max_body_bytes, shapes.PullRequest)
        name = body.target
        stream = body.stream is not False
        if not name.startswith(("http://", "https://")):
            try:
                self.models.spec(name)
            except ModelNotFound:
                if (hub := hub_name(name)) is None:
                    raise shapes.not_pullable(name) from None
            else:
                return self._answer([shapes.progress("success")], stream)
            if self.downloads is None:
                raise no_models_dir()
            name = await link_for(self.downloads, hub)
        if self.downloads is None:
            raise no_models_dir()
        started = await start_download(self.downloads, name, followed=True)
        file = self.downloads.destination(name)
        if started["status"] == "already_downloaded":
            return self._answer(self._done_lines(file), stream)
        job = self.downloads.job(started["job_id"])
        assert job is not None  # start() just made or joined it
        if job.state == "failed":  # before any byte: a real HTTP error
            raise failure(job)
        # Supervised as every call: stopped when the drain's grace ends, abandoned when
        # its client leaves (the job stops once no pull follows it); no deadline of its
        # own (the download has one).
        supervisor = Supervisor.for_call(request.app, access_record(request), None)
        leave = self.downloads.follow(job)
        if stream:
            return EventStreamResponse(self._progress(job, file, supervisor),
                                       framing="ndjson", keepalive_seconds=0, on_close=leave)
        try:
            await supervisor.answer(request.receive, job.ended.wait())
        finally:
            leave()
        if job.state != "completed":
            raise failure(job)
        return self._done_lines(file)[-1]

    async def _progress(self, job: DownloadJob, file: Path, supervisor: Supervisor
                        ) -> AsyncGenerator[Frame, None]:
        """Lines while the job runs (only when they change), then the end of the pull:
        success, or an error line (the job failed, the server is shutting down)."""
        status, last = f"pulling {file.name}", None
        with supervisor.overseeing() as stopped:
            while True:
                shown = job.status()  # sizes only once the bytes proved a GGUF file
                line = shapes.progress(status, file.name, shown.get("total_size_bytes"),
                                       shown.get("downloaded_bytes"))
                if line != last:
                    yield Frame(line)
                    last = line
                if job.ended.is_set():
                    break
                if supervisor.reason is not None:
                    yield error_line(supervisor.reason)
                    return
                await _either(job.ended, stopped, timeout=PROGRESS_EVERY)
        if job.state != "completed":
            yield error_line(failure(job) if job.state == "failed" else ServerShuttingDown())
            return
        for done in self._done_lines(file):
            yield Frame(done)

    def _done_lines(self, file: Path) -> list[dict[str, Any]]:
        """The end of a pull: the name the model is served under, then success."""
        found = served_name(self.downloads.models_dir, file) if self.downloads else None
        lines = []
        if found is not None:
            lines.append(shapes.progress(f"pulled {file.name} as {tagged(found)}"))
        lines.append(shapes.progress("success"))
        return lines

    @staticmethod
    def _answer(lines: list[dict[str, Any]], stream: bool) -> Any:
        if not stream:
            return lines[-1]
        return EventStreamResponse([Frame(line) for line in lines], framing="ndjson",
                                   keepalive_seconds=0, on_close=lambda: None)


async def _either(*events: asyncio.Event, timeout: float) -> None:
    """Until one of `events` is set, or `timeout` seconds at most."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
