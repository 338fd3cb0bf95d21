"""Ollama's model endpoints: `GET /api/tags`, `POST /api/show`, `GET /api/ps`,
`GET /api/version`, `POST /api/pull`, `DELETE /api/delete`, `POST /api/copy`. Errors
use Ollama's envelope (`{"error": …}`, `model 'x' not found` with 404).

- pull: a direct http(s) link to a .gguf file is downloaded into the models directory
  by the download manager LM Studio's download endpoint uses (single flight, resumable,
  address-guarded), its progress streamed as Ollama's NDJSON lines; a name this server
  already serves is there already (`success`). Any other name would need Ollama's
  registry, which Parlance does not reach: a 400 that says what to pull instead. As in
  Ollama, a download stops (its `.part` kept) once every pull following it has left;
  pulling it again resumes it, or follows the same job while it runs.
- delete: a name made by copy is forgotten; a model file inside the models directory
  (every shard, a leftover `.part`, emptied directories) is deleted after its model is
  unloaded. Nothing else: configured names, presets, the built-in or wheel models and
  files outside the directory are refused (400), and so is the server's default model.
- copy: one more name for a model (`models.served.ServedModels.copy`), kept in
  `<data dir>/model_copies.json` (`models/copies.py`) so it outlives a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from parlance.core.errors import (
    InvalidRequest,
    ModelNotFound,
    ParlanceError,
    ServerShuttingDown,
)
from parlance.dialects.base import Frame
from parlance.dialects.ollama import models as shapes
from parlance.dialects.ollama import render_error
from parlance.dialects.ollama.errors import error_line
from parlance.dialects.wire import M, parse_body
from parlance.models.copies import FILE_NAME, CopyFile
from parlance.models.discovery import model_parts, scan_models_dir
from parlance.models.download_job import DownloadJob
from parlance.models.downloads import DownloadManager, destination_for
from parlance.models.gguf import GgufHeader, GgufInfo, describe, header_digest, read_gguf_header
from parlance.models.registry import ModelSpec, name_variants, tagged
from parlance.models.removal import NotRemovable, removable_files, remove_model_files
from parlance.models.served import ServedModel, ServedModels, file_size
from parlance.server.body.reader import read_json
from parlance.server.endpoints.answering import answering
from parlance.server.generation.streaming import EventStreamResponse
from parlance.server.settings import ServerSettings

PROGRESS_EVERY = 0.5  # seconds between pull progress lines while bytes arrive
NOT_PULLABLE = ("Parlance cannot pull '{name}': it is no model this server has, and "
                "{why}. Pull a direct link to a .gguf file instead, e.g. https://"
                "huggingface.co/<owner>/<repo>/resolve/main/<file>.gguf, or name a model "
                "GET /api/tags lists.")
REGISTRY = "names from Ollama's registry cannot be fetched here"
HUGGING_FACE = ("Hugging Face names (hf.co/<owner>/<repo>:<quantization>) are not looked "
                "up here")


@dataclass(frozen=True, slots=True)
class Described:
    """A model file as Ollama's listings show it, read from its header alone."""

    header: GgufHeader
    info: GgufInfo
    digest: str
    modified_ns: int
    size: int  # every shard's bytes


@functools.lru_cache(maxsize=256)
def _described(path: Path, mtime_ns: int, size: int) -> Described | None:
    try:
        header = read_gguf_header(path)
        total = sum(part.stat().st_size for part in model_parts(path))
        return Described(header, describe(header), header_digest(path, header), mtime_ns,
                         total)
    except (OSError, ValueError):
        return None


def described(spec: ModelSpec) -> Described | None:
    """Cached by the file's path, modification time and size (blocking: a header read)."""
    try:
        path = spec.locate()
        stat = path.stat()
    except (OSError, ValueError):
        return None
    return _described(path, stat.st_mtime_ns, stat.st_size)


class _Stop:
    """A pull stream's place in the server's drain: told to stop when the grace ends."""

    def __init__(self) -> None:
        self.reason: ParlanceError | None = None

    def stop(self, reason: ParlanceError) -> None:
        self.reason = reason


def _modified(spec: ModelSpec, created: int | None) -> int | None:
    """When the model came to be (ns): its file's modification time, else when it was
    loaded; None: unknown."""
    try:
        return spec.locate().stat().st_mtime_ns
    except (OSError, ValueError):
        return created * 1_000_000_000 if created else None


def _settings(spec: ModelSpec) -> dict[str, Any]:
    """The model's own defaults, as Modelfile parameters show them."""
    return {**spec.sampling, "ctx_size": spec.ctx_size}


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

    async def _body(self, request: Request, model: type[M]) -> M:
        return await read_json(request, self.settings.max_body_bytes,
                               functools.partial(parse_body, model))

    # -- listings -----------------------------------------------------------------

    async def _tags(self, request: Request) -> dict[str, Any]:
        """Every model a request may name, then every name made by copy, each shown
        with a tag."""
        specs = self.models.available()
        copies = self.models.copies
        created = {m.spec.id: m.created for m in self.models}
        return {"models": await asyncio.to_thread(self._tag_entries, specs, copies, created)}

    @staticmethod
    def _tag_entries(specs: list[ModelSpec], copies: dict[str, str], created: dict[str, int]
                     ) -> list[dict[str, Any]]:
        by_id = {spec.id: spec for spec in specs}
        named = [(tagged(spec.id), spec) for spec in specs]
        named += [(tagged(name), by_id[target]) for name, target in copies.items()
                  if target in by_id]
        out = []
        for shown, spec in named:
            found = described(spec)
            if found is None:  # no GGUF header to read (an upstream server's model)
                out.append(shapes.tag_entry(shown, None, file_size(spec),
                                            _modified(spec, created.get(spec.id)), "",
                                            shapes.capabilities({}, spec.chat_template)))
                continue
            caps = shapes.capabilities(found.header.metadata,
                                       spec.chat_template or found.info.chat_template)
            out.append(shapes.tag_entry(shown, found.info, found.size, found.modified_ns,
                                        found.digest, caps))
        return out

    async def _ps(self, request: Request) -> dict[str, Any]:
        loaded = list(self.models)
        found = await asyncio.to_thread(lambda: [described(m.spec) for m in loaded])
        now = time.time_ns()
        rows = []
        for model, file in zip(loaded, found, strict=True):
            expires_at = self.models.expires_at(model)
            rows.append((expires_at, self._ps_entry(model, file, expires_at, now)))
        # As Ollama orders them: the longest time left first (never: first of all).
        rows.sort(key=lambda row: float("inf") if row[0] is None else row[0], reverse=True)
        return {"models": [entry for _, entry in rows]}

    @staticmethod
    def _ps_entry(model: ServedModel, found: Described | None, expires_at: float | None,
                  now_ns: int) -> dict[str, Any]:
        return shapes.ps_entry(tagged(model.spec.id), found.info if found else None,
                               model.size_bytes, found.digest if found else "",
                               shapes.expiry(expires_at, now_ns),
                               model.engine.context_length)

    async def _show(self, request: Request) -> dict[str, Any]:
        body = await self._body(request, shapes.ShowRequest)
        name = body.target
        spec = self.models.spec(name)

        loaded = next((m for m in self.models if m.spec.id == spec.id), None)
        modified_ns = _modified(spec, loaded.created if loaded else None)

        def read() -> GgufHeader | None:
            if not body.verbose:  # clients show every listed model: the cached header
                found = described(spec)
                return found.header if found else None
            try:
                return read_gguf_header(spec.locate(), whole_arrays=True)
            except (OSError, ValueError):
                return None

        header = await asyncio.to_thread(read)
        if header is None:  # no GGUF header to read (an upstream server's model)
            return shapes.show(tagged(name), None, {}, spec.chat_template, _settings(spec),
                               shapes.capabilities({}, spec.chat_template), modified_ns, None)
        info = describe(header)
        template = spec.chat_template or info.chat_template
        meta = header.metadata
        license_text = meta.get("general.license")
        return shapes.show(
            tagged(name), info,
            shapes.model_info(meta, header.array_lengths, info.parameter_count, body.verbose),
            template, _settings(spec), shapes.capabilities(meta, template), modified_ns,
            license_text if isinstance(license_text, str) else None)

    async def _version(self, request: Request) -> dict[str, Any]:
        return {"version": shapes.OLLAMA_VERSION}

    # -- copy and delete ----------------------------------------------------------

    async def _copy(self, request: Request) -> Response:
        source, destination = (await self._body(request, shapes.CopyRequest)).checked()
        self.models.copy(source, destination)
        self.copy_file.save(self.models.copies)
        return Response(status_code=200)

    async def _delete(self, request: Request) -> Response:
        name = (await self._body(request, shapes.DeleteRequest)).target
        if self.models.forget_copy(name) is not None:
            self.copy_file.save(self.models.copies)
            return Response(status_code=200)
        spec = self.models.spec(name)
        models_dir = self.settings.models_dir
        if spec.id not in name_variants(name):
            raise InvalidRequest(f"'{name}' is a configured name of the model '{spec.id}'; "
                                 "delete a model by its own name", param="model")
        default = self.models.default_spec
        if default is not None and default.id == spec.id:
            raise InvalidRequest(f"'{name}' is the model this server was started with; it "
                                 "cannot be deleted while the server runs", param="model")
        try:
            if models_dir is None:
                raise NotRemovable("no models directory")
            files = removable_files(spec.locate(), models_dir)
        except (NotRemovable, OSError) as exc:
            raise InvalidRequest(
                f"'{name}' is not a downloaded model: Parlance deletes only model files in "
                "its models directory (parlance serve --models-dir) and names made by "
                "/api/copy", param="model") from exc
        await self.models.unload(spec.id)
        await asyncio.to_thread(remove_model_files, files, models_dir)
        if self.models.forget_copies_of(spec.id):
            self.copy_file.save(self.models.copies)
        return Response(status_code=200)

    # -- pull ---------------------------------------------------------------------

    async def _pull(self, request: Request) -> Any:
        body = await self._body(request, shapes.PullRequest)
        name = body.target
        stream = body.stream is not False
        if not name.startswith(("http://", "https://")):
            try:
                self.models.spec(name)
            except ModelNotFound:
                why = HUGGING_FACE if name.lower().startswith(
                    ("hf.co/", "huggingface.co/")) else REGISTRY
                raise InvalidRequest(NOT_PULLABLE.format(name=name, why=why), param="model",
                                     code="not_pullable") from None
            return self._answer([shapes.progress("success")], stream)
        if self.downloads is None:
            raise InvalidRequest("This server has no models directory to download into "
                                 "(parlance serve --models-dir).", param="model")
        try:
            started = await self.downloads.start(name, followed=True)
        except ValueError as exc:  # not a link to a .gguf file, or a refused address
            raise InvalidRequest(str(exc), param="model") from exc
        file = destination_for(self.downloads.models_dir, name)
        if started["status"] == "already_downloaded":
            return self._answer(self._done_lines(file), stream)
        job = self.downloads.job(started["job_id"])
        assert job is not None  # start() just made or joined it
        if job.state == "failed":  # before any byte: a real HTTP error
            raise _failure(job)
        drain = request.app.state.drain
        stopper = _Stop()
        drain.enrol(stopper)
        leave = self.downloads.follow(job)
        if not stream:
            try:
                while not job.ended.is_set() and stopper.reason is None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(job.ended.wait(), PROGRESS_EVERY)
            finally:
                drain.leave(stopper)
                leave()
            if stopper.reason is not None:
                raise stopper.reason
            if job.state != "completed":
                raise _failure(job)
            return self._done_lines(file)[-1]
        def close() -> None:
            drain.leave(stopper)
            leave()

        return EventStreamResponse(self._progress(job, file, stopper), framing="ndjson",
                                   keepalive_seconds=0, on_close=close)

    async def _progress(self, job: DownloadJob, file: Path, stopper: _Stop
                        ) -> AsyncGenerator[Frame, None]:
        """Lines while the job runs (only when they change), then the end of the pull:
        success, or an error line (the job failed, the server is shutting down)."""
        status, last = f"pulling {file.name}", None
        while True:
            shown = job.status()  # sizes only once the bytes proved a GGUF file
            line = shapes.progress(status, file.name, shown.get("total_size_bytes"),
                                   shown.get("downloaded_bytes"))
            if line != last:
                yield Frame(line)
                last = line
            if job.ended.is_set():
                break
            if stopper.reason is not None:
                yield error_line(stopper.reason)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(job.ended.wait(), PROGRESS_EVERY)
        if job.state != "completed":
            yield error_line(_failure(job) if job.state == "failed" else ServerShuttingDown())
            return
        for done in self._done_lines(file):
            yield Frame(done)

    def _done_lines(self, file: Path) -> list[dict[str, Any]]:
        """The end of a pull: the name the model is served under, then success."""
        models_dir = self.downloads.models_dir if self.downloads else None
        found = next((m.key for m in scan_models_dir(models_dir) if m.path == file),
                     None) if models_dir else None
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


def _failure(job: DownloadJob) -> ParlanceError:
    """A failed download: the URL's fault (400: no such file, no GGUF, unreachable) or
    this server's (500: the file could not be written)."""
    message = job.error or "download failed"
    if job.failed_here:
        return ParlanceError(message, code="download_failed")
    return InvalidRequest(message, param="model", code="download_failed")
