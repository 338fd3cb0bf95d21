"""LM Studio's model management endpoints: list (`GET /api/v1/models`), load, unload,
download and download status. Errors use LM Studio's envelope. What a model's facts
are (`models/facts.py`) and what a download is answered (`models/download_policy.py`)
is the models layer's.

A load answers once it is done, as LM Studio's does; a client that asks for a stream
(`Accept: text/event-stream`) is shown its progress as it runs (`LoadEncoder`), after
everything that could refuse it was checked (a real HTTP error). Either way the wait is
a call like any other (`Supervisor`): bounded by the request deadline (the one that
also bounds a chat loading its model inside its response) and stopped when the drain's
grace ends, answered in LM Studio's envelope (408, 503) or, in the stream, by its
`error` event; a load done by then answers as usual. A client that leaves only stops
waiting. The load itself runs to its end either way and its model stays loaded: loads
are single-flight, so another request may be waiting for this very one, and a load is
one blocking llama.cpp call on a worker thread."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from typing import Any

from starlette.requests import Request

from parlance.core.errors import InvalidRequest, ModelNotFound, ParlanceError, ResourceNotFound
from parlance.dialects.base import Frame
from parlance.dialects.lmstudio import render_error
from parlance.dialects.lmstudio.models import (
    DownloadRequest,
    LoadEncoder,
    LoadRequest,
    UnloadRequest,
    load_answer,
    model_object,
)
from parlance.models.download_policy import link_for, no_models_dir, start_download
from parlance.models.downloads import DownloadManager
from parlance.models.facts import facts_of
from parlance.models.headers import file_size
from parlance.models.hub import hub_name
from parlance.models.registry import ModelSpec
from parlance.models.served import LoadOptions, ServedModels
from parlance.server.body.reader import read_wire
from parlance.server.calls.lease import ReportedLoad
from parlance.server.calls.streaming import EventStreamResponse
from parlance.server.calls.supervision import Supervisor
from parlance.server.endpoints.answering import answering
from parlance.server.http.access_log import access_record
from parlance.server.settings import ServerSettings


class LMStudioModels:
    def __init__(self, models: ServedModels, settings: ServerSettings,
                 downloads: DownloadManager | None) -> None:
        self.models = models
        self.settings = settings
        self.downloads = downloads
        keys = settings.api_keys
        self.list = answering(self._list, keys, render_error)
        self.load = answering(self._load, keys, render_error)
        self.unload = answering(self._unload, keys, render_error)
        self.download = answering(self._download, keys, render_error)
        self.download_status = answering(self._download_status, keys, render_error)

    async def _list(self, request: Request) -> dict[str, Any]:
        loaded = {m.spec.id: m.config for m in self.models}
        specs = self.models.available()

        def objects() -> list[dict[str, Any]]:  # (headers are read off the loop)
            return [model_object(spec.id, facts_of(spec), file_size(spec), loaded.get(spec.id))
                    for spec in specs]

        return {"models": await asyncio.to_thread(objects)}

    async def _load(self, request: Request) -> Any:
        body = await read_wire(request, self.settings.max_body_bytes, LoadRequest)
        spec = self.models.spec(body.model)
        options = LoadOptions(body.context_length, body.eval_batch_size, body.parallel)
        current = next((m for m in self.models if m.spec.id == spec.id), None)
        if current is not None and body.context_length not in (
                None, current.config.get("context_length")):
            self.models.plan(spec, options)  # refused before the loaded one is let go
            await self.models.unload(spec.id)  # a different context: load it afresh
            current = None
        record = access_record(request)
        record.model = spec.id
        supervisor = Supervisor.for_call(request.app, record, self.settings.request_timeout)
        if "text/event-stream" in request.headers.get("accept", ""):
            if current is None:
                self.models.plan(spec, options)  # refused before the stream starts
            return EventStreamResponse(
                self._load_events(spec, options, body.echo_load_config, supervisor),
                framing="sse", keepalive_seconds=self.settings.keepalive_seconds,
                on_close=lambda: None)
        started = time.perf_counter()
        model, _ = await supervisor.answer(request.receive, self.models.load(spec, options))
        return load_answer(model.spec.id, time.perf_counter() - started,
                           model.config if body.echo_load_config else None)

    async def _load_events(self, spec: ModelSpec, options: LoadOptions, echo: bool,
                           supervisor: Supervisor) -> AsyncGenerator[Frame, None]:
        """The load's stream, overseen while the load runs: stopped (the deadline, the
        drain's end), it ends with the `error` event; closed (the client left), it
        just ends. The load runs on either way."""
        encoder = LoadEncoder(spec.id)
        started = time.perf_counter()
        loading = ReportedLoad(lambda report: self.models.load(spec, options, report))
        try:
            with supervisor.overseeing() as stopped:
                async with contextlib.aclosing(loading.fractions(stopped)) as fractions:
                    async for fraction in fractions:
                        for frame in encoder.progress(fraction):
                            yield frame
            if not loading.task.done():  # stopped first
                assert supervisor.reason is not None
                raise supervisor.reason
            model, _ = loading.task.result()
        except ParlanceError as exc:
            for frame in encoder.fail(exc):
                yield frame
            return
        for frame in encoder.close(time.perf_counter() - started,
                                   model.config if echo else None):
            yield frame

    async def _unload(self, request: Request) -> dict[str, Any]:
        body = await read_wire(request, self.settings.max_body_bytes, UnloadRequest)
        if not await self.models.unload(body.instance_id):
            raise ModelNotFound(body.instance_id)
        return {"instance_id": body.instance_id}

    async def _download(self, request: Request) -> dict[str, Any]:
        body = await read_wire(request, self.settings.max_body_bytes, DownloadRequest)
        if self.downloads is None:
            raise no_models_dir()
        link = body.model
        if not link.startswith(("http://", "https://")):
            # a catalog id, `owner/repo` (LM Studio's `quantization` may name the file)
            hub = hub_name(link if body.quantization is None
                           else f"{link}:{body.quantization}")
            if hub is None:
                raise InvalidRequest(
                    f"'{body.model}' is neither a link to a .gguf file nor a catalog name "
                    "(owner/repo, hf.co/owner/repo, with :QUANT or `quantization`).",
                    param="model", code="invalid_model")
            link = await link_for(self.downloads, hub)
        return await start_download(self.downloads, link)

    async def _download_status(self, request: Request) -> dict[str, Any]:
        job_id = request.path_params["job_id"]
        status = self.downloads.status(job_id) if self.downloads else None
        if status is None:
            raise ResourceNotFound(f"No download job with id '{job_id}'.", param="job_id",
                                   code="job_not_found")
        return status
