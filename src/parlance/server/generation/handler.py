"""The one generic handler behind every generation endpoint.

parse → resolve model → engine.start (all refusals happen here, before any
byte is sent) → either a frame stream or `render(accumulate(events))`.
It owns the request deadline, the mid-stream error frame and cancellation.
Its `start` and `frames` also serve WebSocket mode (`server/generation/socket_mode.py`) and
background responses (`server/generation/background.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parlance.core.accumulate import Accumulator
from parlance.core.errors import ContextOverflow, InvalidRequest, ParlanceError, RequestTimeout
from parlance.core.events import Failed
from parlance.core.request import with_sampling_defaults
from parlance.dialects.base import (
    Call,
    Dialect,
    Frame,
    Pings,
    ReportsLoading,
    Served,
    Stateful,
    Truncating,
)
from parlance.engines.base import Generation
from parlance.integrations.loop import ToolLoop
from parlance.integrations.toolbox import Toolbox
from parlance.models.served import LoadOptions, ServedModel, ServedModels
from parlance.server.body.reader import read_json
from parlance.server.generation.conversations import Memory
from parlance.server.generation.loading import LoadingGeneration
from parlance.server.generation.streaming import EventStreamResponse
from parlance.server.generation.supervision import (
    Started,
    StopSwitch,
    Watch,
    guarded,
    race_disconnect,
    unless_left,
)
from parlance.server.http.access_log import AccessRecord, access_record
from parlance.server.http.auth import authorize
from parlance.server.http.refusal import error_response
from parlance.server.settings import ServerSettings
from parlance.store.responses import ResponseStore

if TYPE_CHECKING:
    from parlance.server.generation.background import BackgroundRuns


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
            started = await unless_left(request, self.start(call, watch, self.memory))
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
                call, generation = await self._start(call, model, toolbox, watch.deadline)
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
            return (await self._start(call, model, toolbox, None))[1]

        return LoadingGeneration(
            name, lambda progress: self.models.acquire(name, progress, options), start)

    async def _start(self, call: Call, model: Any, toolbox: Toolbox | None,
                     deadline: float | None) -> tuple[Call, Generation]:
        """Start the generation (inside the server-side tool loop when there are
        server-side tools); for a `Truncating` dialect, drop the oldest turns until
        the prompt fits the context. The request deadline bounds the engine's start
        too (an upstream that never answers holds nobody past it); None: the caller's
        own deadline already does (a load inside the response)."""
        while True:
            request = with_sampling_defaults(call.request, dict(model.spec.sampling))
            start = model.engine.start
            timer = asyncio.timeout_at(deadline)
            try:
                async with timer:
                    if toolbox is not None:
                        return call, await ToolLoop.begin(request, toolbox, start)
                    return call, await start(request)
            except TimeoutError:
                if not timer.expired():
                    raise
                raise RequestTimeout() from None
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
