"""The one generic handler behind every generation endpoint.

`handle`: authorize, read and parse the body, then `start` (the model's lease, the
call's tool servers, `engine.start`: every refusal happens there, before any byte is
sent, so it is a real HTTP error even for `stream: true`), then the dialect's frames
(`frames`) or one answer, `render(accumulate(events))`. The call's `Supervisor` stops
it at its deadline, at the drain's end or by its stop switch, and its answer still
ends by the dialect's contract. `start` and `frames` also serve WebSocket mode
(`socket_mode.py`) and background responses (`background.py`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from parlance.core.accumulate import Accumulator
from parlance.core.errors import ContextOverflow, ParlanceError
from parlance.core.events import Failed
from parlance.core.request import with_preset_tool_choice, with_sampling_defaults
from parlance.dialects.base import (
    Backgrounds,
    Call,
    CallFacts,
    Dialect,
    Encoder,
    Frame,
    Pings,
    ReportsLoading,
    Stateful,
    Truncating,
    outcome,
)
from parlance.engines.base import Generation
from parlance.integrations.loop import ToolLoop
from parlance.integrations.toolbox import Toolbox
from parlance.models.served import ServedModel, ServedModels
from parlance.server.body.reader import read_incoming
from parlance.server.calls.conversations import Conversations
from parlance.server.calls.keepalive import progress_of
from parlance.server.calls.lease import LoadingGeneration, call_lease, load_only
from parlance.server.calls.streaming import EventStreamResponse
from parlance.server.calls.supervision import Started, StopSwitch, Supervisor
from parlance.server.calls.tool_servers import open_tool_servers
from parlance.server.generation.parlance_headers import PARLANCE_HEADERS, with_parlance_headers
from parlance.server.http.access_log import access_record
from parlance.server.http.auth import authorize
from parlance.server.http.refusal import error_response
from parlance.server.openapi.operation import Operation, generating
from parlance.server.settings import ServerSettings
from parlance.store.responses import ResponseStore

if TYPE_CHECKING:
    from parlance.server.calls.background import BackgroundRuns


class GenerationHandler:
    def __init__(self, dialect: Dialect[Any], models: ServedModels, settings: ServerSettings,
                 store: ResponseStore | None = None, runs: BackgroundRuns | None = None, *,
                 tag: str):
        self.dialect = dialect
        self.tag = tag  # the API it belongs to (as the OpenAPI document groups routes)
        self.models = models
        self.settings = settings
        self.conversations = (Conversations(dialect, store)
                              if store is not None and isinstance(dialect, Stateful) else None)
        self.runs = runs  # where calls run that go on without their client
        # What the dialect can do, asked once (a Protocol isinstance costs µs per request)
        self._ping = dialect.ping if isinstance(dialect, Pings) else None
        self._reports_loading = isinstance(dialect, ReportsLoading)
        self._truncating: Truncating[Any] | None = (
            dialect if isinstance(dialect, Truncating) else None)
        # the response a stream's opening frame announces, for a dialect whose responses
        # can be retrieved (and deleted) while they run
        self._progress = dialect.progress if isinstance(dialect, Backgrounds) else _nothing

    def operation(self) -> Operation:
        """What `/openapi.json` says of this route: its dialect's, with the headers."""
        operation = generating(self.dialect, self.tag)
        return dataclasses.replace(operation, headers=(*operation.headers, *PARLANCE_HEADERS))

    async def handle(self, request: Request) -> Any:
        record = access_record(request)
        supervisor = Supervisor.for_call(request.app, record, self.settings.request_timeout)
        try:
            authorize(request, self.settings.api_keys)
            call = with_parlance_headers(request, await read_incoming(
                request, self.settings.max_body_bytes, self.dialect.parse))
            if call.load_only:  # its wait is bounded and drained as any call's
                return await supervisor.answer(
                    request.receive, load_only(self.models, self.dialect, call, record))
            background = self.runs is not None and self.runs.takes(call)
            if background:
                supervisor.switch = StopSwitch()
            started = await supervisor.unless_left(
                request.receive, self.start(call, supervisor, self.conversations))
        except ParlanceError as exc:
            return error_response(self.dialect.render_error, exc)
        if background:
            assert self.runs is not None
            return await self.runs.launch(started, self.frames(started))
        if started.call.stream:
            encoder = self.dialect.encoder(started.call, started.served)
            return EventStreamResponse(
                self.frames(started, encoder),
                framing=started.call.framing or self.dialect.framing,
                keepalive_seconds=self.settings.keepalive_seconds,
                on_close=started.generation.cancel,
                ping=self._ping,
                idle=progress_of(encoder),
            )
        try:
            return await self._complete(request, started)
        finally:
            await started.close()

    async def start(self, call: Call, supervisor: Supervisor,
                    conversations: Conversations | None) -> Started:
        """Take the model and start the generation: everything that can refuse the call
        does it here, before anything is sent. The HTTP route and WebSocket mode both
        start calls here, then send `frames(started)`."""
        toolbox = lease = None
        try:
            if conversations is not None:
                call = conversations.recall(call)
            lease = call_lease(self.models, call)
            # A cold model is loaded inside the response for a dialect that reports the
            # load; what would refuse the load (404 for a model that does not exist at
            # all, 400 for load options out of range or a load too big for memory)
            # refuses the call now, before the response starts.
            cold = self._reports_loading and not self.models.is_loaded(call.request.model)
            lease.check(loading_later=cold)
            if not cold:
                await lease.acquire()
            call, toolbox = await open_tool_servers(call, self.settings.integrations)
            generation: Generation
            if cold:
                generation = LoadingGeneration(lease, functools.partial(
                    self._start_on, call, toolbox=toolbox))
            else:
                call, generation = await supervisor.by_deadline(
                    self._start(call, lease.model, toolbox))
        except BaseException:
            if toolbox is not None:
                await toolbox.aclose()
            if lease is not None:
                lease.release()
            raise
        supervisor.record.model = lease.name
        supervisor.record.prompt_size = sum(p.n_tokens for p in generation.prompts) or None
        served = CallFacts(lease.name, generation.prompts, lease.load_seconds,
                        lease.ready_seconds)
        return Started(call, served, generation, supervisor, lease, toolbox, conversations)

    async def _start_on(self, call: Call, model: ServedModel, *,
                        toolbox: Toolbox | None) -> Generation:
        """The generation, once a model loaded inside the response is there (inside the
        response, whose events the supervisor already bounds)."""
        return (await self._start(call, model, toolbox))[1]

    async def _start(self, call: Call, model: ServedModel,
                     toolbox: Toolbox | None) -> tuple[Call, Generation]:
        """Start the generation (inside the server-side tool loop when there are
        server-side tools); for a `Truncating` dialect, drop the oldest turns until
        the prompt fits the context."""
        while True:
            request = with_preset_tool_choice(
                with_sampling_defaults(call.request, dict(model.spec.sampling)),
                model.spec.tool_choice)
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

    async def frames(self, started: Started,
                     encoder: Encoder | None = None) -> AsyncGenerator[Frame, None]:
        """The call's stream, in the dialect's frames, ending by its contract; closing
        it early (the client left) cancels the generation. `encoder`: the one the
        transport also asks for idle frames, else a new one."""
        call, conversations = started.call, started.conversations
        if encoder is None:
            encoder = self.dialect.encoder(call, started.served)
        begun = False
        try:
            for frame in encoder.open():
                snapshot = self._progress(frame) if conversations is not None else None
                if snapshot is not None and not begun:  # retrievable, deletable, as it runs
                    conversations.begin(call, snapshot)  # type: ignore[union-attr]
                    begun = True
                yield frame
            events = started.supervisor.events(started.generation)
            async with contextlib.aclosing(events):
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
            if conversations is not None and begun:  # (unless it was deleted meanwhile)
                conversations.end(call, outcome(encoder))
            elif conversations is not None:
                conversations.keep(call, outcome(encoder))
            await started.close()

    async def _complete(self, request: Request, started: Started) -> Response:
        call, served, conversations = started.call, started.served, started.conversations
        accumulator = Accumulator()

        async def collect() -> None:
            events = started.supervisor.events(started.generation)
            async with contextlib.aclosing(events):
                async for event in events:
                    accumulator.feed(event)

        try:
            await started.supervisor.unless_left(request.receive, collect())
        except ClientDisconnect:
            if conversations is not None:
                body = self.dialect.render(call, served, accumulator.result)
                conversations.keep(call, conversations.dialect.cancelled(body))
            return Response(status_code=499)  # nobody is listening any more
        result = accumulator.result
        if result.error is not None:
            return error_response(self.dialect.render_error, result.error)
        body = self.dialect.render(call, served, result)
        if conversations is not None:
            conversations.keep(call, body)
        return JSONResponse(body)


def _nothing(frame: Frame) -> None:
    return None
