"""The one generic handler behind every generation endpoint.

parse → resolve model → engine.start (all refusals happen here, before any
byte is sent) → either a frame stream or `render(accumulate(events))`.
It owns the request deadline, the mid-stream error frame and cancellation.
Its `start` and `frames` also serve WebSocket mode (`server/socket_mode.py`) and
background responses (`server/background.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parlance.config import DEFAULT_MAX_BODY_MB
from parlance.core.accumulate import Accumulator
from parlance.core.errors import (
    ContextOverflow,
    EngineFailure,
    InvalidRequest,
    ParlanceError,
    RequestTimeout,
)
from parlance.core.events import Event, Failed, Usage
from parlance.core.request import with_sampling_defaults
from parlance.dialects.base import (
    Call,
    Dialect,
    ErrorResponse,
    Frame,
    Pings,
    ReportsLoading,
    Served,
    Stateful,
    Truncating,
)
from parlance.engines.base import Generation
from parlance.integrations.loop import ToolLoop
from parlance.integrations.settings import IntegrationSettings
from parlance.integrations.toolbox import Toolbox
from parlance.models.served import LoadOptions, ServedModel, ServedModels
from parlance.server.access_log import AccessRecord, access_record
from parlance.server.auth import authorize
from parlance.server.body import read_json
from parlance.server.drain import Drain, Stoppable
from parlance.server.loading import LoadingGeneration
from parlance.server.memory import Memory
from parlance.server.streaming import EventStreamResponse
from parlance.store.responses import DEFAULT_RETENTION, ResponseStore

if TYPE_CHECKING:
    from parlance.server.background import BackgroundRuns

log = logging.getLogger("parlance.server")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    api_keys: tuple[str, ...] = ()
    keepalive_seconds: float = 10.0
    request_timeout: float = 120.0
    data_dir: Path | None = None  # stored responses; None keeps them in memory
    responses_retention: int = DEFAULT_RETENTION
    integrations: IntegrationSettings = field(default_factory=IntegrationSettings)
    models_dir: Path | None = None  # where downloads go (and the catalog looks)
    download_allow_hosts: tuple[str, ...] = ()  # non-public hosts downloads may reach
    # What a browser may do (server/origins.py): origins allowed beside loopback ones and
    # Host names beside loopback names ("*": any), and the address the server listens on:
    # a loopback one turns the Host check on; None (tests, an embedding) leaves it off
    # unless allowed_hosts is given.
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    bind_host: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_MB * 2**20  # larger request bodies get a 413
    shutdown_grace: float = 10.0  # seconds running generations may finish on shutdown


def error_json(rendered: ErrorResponse) -> Response:
    return JSONResponse(rendered.body, rendered.status, headers=rendered.headers)


def error_response(dialect: Dialect[Any], error: ParlanceError) -> Response:
    return error_json(dialect.render_error(error))


class GenerationHandler:
    def __init__(self, dialect: Dialect[Any], models: ServedModels, settings: ServerSettings,
                 store: ResponseStore | None = None, runs: BackgroundRuns | None = None):
        self.dialect = dialect
        self.models = models
        self.settings = settings
        self.memory = (Memory(dialect, store)
                       if store is not None and isinstance(dialect, Stateful) else None)
        self.runs = runs  # where calls run that go on without their client
        # What the dialect can do, asked once (a Protocol isinstance costs µs per request)
        self._ping = dialect.ping if isinstance(dialect, Pings) else None
        self._reports_loading = isinstance(dialect, ReportsLoading)
        self._truncating: Truncating[Any] | None = (
            dialect if isinstance(dialect, Truncating) else None)

    async def handle(self, request: Request) -> Any:
        watch = self.watch(request.app, access_record(request))
        try:
            authorize(request, self.settings.api_keys)
            call = await read_json(request, self.settings.max_body_bytes, self.dialect.parse)
            if call.load_only:
                return await self._load_only(call, watch)
            background = self.runs is not None and self.runs.takes(call)
            if background:
                watch = replace(watch, switch=StopSwitch())
            started = await self.start(call, watch, self.memory)
        except ParlanceError as exc:
            return error_response(self.dialect, exc)
        if background:
            assert self.runs is not None
            return await self.runs.launch(started, self.frames(started))
        if started.call.stream:
            return EventStreamResponse(
                self.frames(started),
                framing=self.dialect.framing,
                keepalive_seconds=self.settings.keepalive_seconds,
                on_close=started.generation.cancel,
                ping=self._ping,
            )
        try:
            return await self._complete(request, started)
        finally:
            if started.toolbox is not None:
                await started.toolbox.aclose()
            self.models.release(started.served.model)

    async def _load_only(self, call: Call, watch: Watch) -> Response:
        """Load the call's model (with keep_alive 0: unload it) and answer at once."""
        name = call.request.model
        load_seconds = None
        if call.keep_alive == 0:
            self.models.spec(name)  # 404 for a model that does not exist at all
            await self.models.expire(name)
        else:
            model, name, load_seconds = await self.models.acquire(
                name, None, LoadOptions(context_length=call.context_length))
            self.models.keep(model, call.keep_alive)
        watch.record.model = name
        served = Served(name, (), load_seconds)
        return JSONResponse(self.dialect.render(call, served, Accumulator().result))

    def watch(self, app: Any, record: AccessRecord) -> Watch:
        """A new call's watch: its deadline from now, the app's drain."""
        deadline = asyncio.get_running_loop().time() + self.settings.request_timeout
        return Watch(deadline, getattr(app.state, "drain", None), record)

    async def start(self, call: Call, watch: Watch, memory: Memory | None) -> Started:
        """Resolve the model and start the generation: everything that can refuse the
        call does it here, before anything is sent. The HTTP route and WebSocket mode
        both start calls here, then send `frames(started)`."""
        toolbox = None
        try:
            if memory is not None:
                call = memory.recall(call)
            name = call.request.model
            cold = self._reports_loading and not self.models.is_loaded(name)
            options = LoadOptions(context_length=call.context_length)
            if cold or options != LoadOptions():
                # 404 for a model that does not exist at all, 400 for load options out of
                # range or a load too big for memory: now, before the response starts.
                self.models.check(name, options)
            load_seconds = None
            if not cold:
                model, name, load_seconds = await self.models.acquire(name, None, options)
                self.models.keep(model, call.keep_alive)
            if call.request.tool_servers:
                toolbox = await Toolbox.open(call.request.tool_servers,
                                             self.settings.integrations)
                call = _with_tools(call, toolbox)
            generation: Generation
            if cold:
                generation = self._load_then_start(call, name, options, toolbox)
            else:
                call, generation = await self._start(call, model, toolbox)
        except ParlanceError:
            if toolbox is not None:
                await toolbox.aclose()
            raise
        watch.record.model = name
        return Started(call, Served(name, generation.prompts, load_seconds), generation, watch,
                       toolbox, memory)

    def _load_then_start(self, call: Call, name: str, options: LoadOptions,
                         toolbox: Toolbox | None) -> LoadingGeneration:
        """The model is not loaded: load it inside the response, reporting progress."""

        async def start(model: ServedModel) -> Generation:
            return (await self._start(call, model, toolbox))[1]

        return LoadingGeneration(
            name, lambda progress: self.models.acquire(name, progress, options), start)

    async def _start(self, call: Call, model: Any,
                     toolbox: Toolbox | None) -> tuple[Call, Generation]:
        """Start the generation (inside the server-side tool loop when there are
        server-side tools); for a `Truncating` dialect, drop the oldest turns until
        the prompt fits the context."""
        while True:
            request = with_sampling_defaults(call.request, dict(model.spec.sampling))
            start = model.engine.start
            try:
                if toolbox is not None:
                    return call, await ToolLoop.begin(request, toolbox, start)
                return call, await start(request)
            except ContextOverflow:
                if self._truncating is None:
                    raise
                smaller = self._truncating.shorter(call)
                if smaller is None:
                    raise
                call = smaller

    async def frames(self, started: Started) -> AsyncGenerator[Frame, None]:
        """The call's stream, in the dialect's frames, ending by its contract; closing
        it early (the client left) cancels the generation."""
        call, memory, toolbox = started.call, started.memory, started.toolbox
        encoder = self.dialect.encoder(call, started.served)
        try:
            for frame in encoder.open():
                yield frame
            async with contextlib.aclosing(guarded(started.generation, started.watch)) as events:
                async for event in events:
                    if isinstance(event, Failed):
                        for frame in encoder.fail(event.error):
                            yield frame
                        return
                    for frame in encoder.feed(event):
                        yield frame
            for frame in encoder.close():
                yield frame
        finally:  # also when the client left mid-stream: the outcome is stored as it is
            if memory is not None:
                memory.keep(call, encoder.outcome())  # type: ignore[attr-defined]
            if toolbox is not None:
                await toolbox.aclose()
            self.models.release(started.served.model)

    async def _complete(self, request: Request, started: Started) -> Response:
        call, served, memory = started.call, started.served, started.memory
        accumulator = Accumulator()

        async def collect() -> None:
            async with contextlib.aclosing(guarded(started.generation, started.watch)) as events:
                async for event in events:
                    accumulator.feed(event)

        left = await race_disconnect(request, collect())
        result = accumulator.result
        if left:
            if memory is not None:
                body = self.dialect.render(call, served, result)
                memory.keep(call, memory.dialect.cancelled(body))
            return Response(status_code=499)  # nobody is listening any more
        if result.error is not None:
            return error_response(self.dialect, result.error)
        body = self.dialect.render(call, served, result)
        if memory is not None:
            memory.keep(call, body)
        return JSONResponse(body)


async def prompt_tokens(models: ServedModels, settings: ServerSettings, call: Call) -> int:
    """The prompt tokens `call` would take, as `start` would evaluate them: the tools of
    its tool servers included (the servers are asked for them, as `start` would)."""
    model, _, _ = await models.acquire(call.request.model)
    if call.request.tool_servers:
        toolbox = await Toolbox.open(call.request.tool_servers, settings.integrations)
        try:
            call = _with_tools(call, toolbox)
        finally:
            await toolbox.aclose()
    return await model.engine.count_tokens(call.request)


def _with_tools(call: Call, toolbox: Toolbox) -> Call:
    """The call offering the model its server-side tools besides the client's own."""
    request = call.request
    tools = (*request.tools, *toolbox.specs())
    choice = request.tool_choice
    if choice.mode == "named" and choice.name not in {t.name for t in tools}:
        raise InvalidRequest(f"tool_choice names the tool '{choice.name}', which no tool "
                             "server of this request offers.", param="tool_choice")
    return replace(call, request=replace(request, tools=tools))


@dataclass(frozen=True, slots=True)
class Watch:
    """What oversees a request's generation: its deadline (event loop time), the
    server's drain (None: an app without one), the access record it fills in, and
    the switch its client may stop it with (a background response's cancel)."""

    deadline: float
    drain: Drain | None
    record: AccessRecord
    switch: StopSwitch | None = None


@dataclass(frozen=True, slots=True)
class Started:
    """A call whose generation runs: nothing can refuse it any more."""

    call: Call
    served: Served
    generation: Generation
    watch: Watch
    toolbox: Toolbox | None  # the request's server-side tools, closed with its stream
    memory: Memory | None  # where its conversation is kept (stateful dialects)


async def guarded(generation: Generation, watch: Watch) -> AsyncGenerator[Event, None]:
    """The generation's events, ending by contract whatever happens: past the
    deadline, when the server's drain ends its grace, when the engine raises, or
    when the engine's stream ends before its final `Usage` (a broken contract), the
    last event is a `Failed`. On the way out (normal end, failure or the consumer
    leaving) the generation is cancelled, which frees what it holds."""
    stopper = Stopper(generation, watch)
    record = watch.record
    ended = False
    failure: ParlanceError | None = None
    try:
        async for event in generation:
            if isinstance(event, Usage | Failed):
                ended = True
                stopper.settle()
            record.observe(event)
            yield event
        if not ended:
            failure = stopper.reason or EngineFailure(
                "The engine ended the stream before it finished.", code="incomplete_stream")
    except ParlanceError as exc:
        failure = exc
    except Exception as exc:
        log.exception("engine stream failed")
        failure = EngineFailure(f"The engine failed: {exc}")
    finally:
        stopper.settle()
        generation.cancel()
    if failure is not None:
        failed = Failed(failure)
        record.observe(failed)
        yield failed


class Stopper:
    """Ends one generation early and remembers why: the request deadline (one timer
    per request), the server's drain or the request's stop switch. The generation is
    cancelled, its stream then ends (the engine contract) and `guarded` reports `reason`.

    One timer instead of a timeout scope around every event keeps the per-token
    work of the event loop small; on a small CPU that work competes with decoding.
    """

    def __init__(self, generation: Generation, watch: Watch) -> None:
        self.reason: ParlanceError | None = None
        self._generation = generation
        self._settled = False
        self._overseers = [o for o in (watch.drain, watch.switch) if o is not None]
        self._handle = asyncio.get_running_loop().call_at(watch.deadline, self._expire)
        for overseer in self._overseers:
            overseer.enrol(self)

    def stop(self, reason: ParlanceError) -> None:
        if self._settled or self.reason is not None:
            return
        self.reason = reason
        self._generation.cancel()

    def _expire(self) -> None:
        self.stop(RequestTimeout())

    def settle(self) -> None:
        """The work is over (done, failed or abandoned): a late stop changes nothing."""
        if not self._settled:
            self._settled = True
            self._handle.cancel()
            for overseer in self._overseers:
                overseer.leave(self)


class StopSwitch:
    """Stops the generation enrolled in it (`Stopper`), now or as soon as it enrols:
    a background response's cancel endpoint, which may come before the generation's
    stream is being read."""

    def __init__(self) -> None:
        self.reason: ParlanceError | None = None
        self._running: set[Stoppable] = set()

    def stop(self, reason: ParlanceError) -> None:
        self.reason = reason
        for work in list(self._running):
            work.stop(reason)

    def enrol(self, work: Stoppable) -> None:
        if self.reason is not None:
            work.stop(self.reason)
        else:
            self._running.add(work)

    def leave(self, work: Stoppable) -> None:
        self._running.discard(work)


async def race_disconnect(request: Request, work: Any) -> bool:
    """Run `work`; True if the client disconnected first (work is then cancelled)."""
    left = False
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            nonlocal left
            while (await request.receive())["type"] != "http.disconnect":
                pass
            left = True
            group.cancel_scope.cancel()

        group.start_soon(watch)
        await work
        group.cancel_scope.cancel()
    return left


