"""WebSocket mode of a generation endpoint (Responses' WebSocket mode on `/v1/responses`).

The handshake is authorized like an HTTP request (its Authorization header); a refusal
is the HTTP error itself, sent as the handshake's denial response. Then each client
message asks for one call, served in order of arrival by the endpoint's one generic
handler: `start` (a refusal becomes an error message carrying its HTTP status, and the
connection stays open), then `frames`, each sent as one message. The connection
remembers its latest responses, stored or not, so a call can continue one with
`previous_response_id` even under `store: false`; a continuation refused as invalid
makes it forget the response that call continued, as OpenAI's WebSocket mode evicts
it (from then on only the store has it). A client that leaves cancels the
running call at once: its frame stream is closed, which cancels the generation and
stores the outcome as cancelled. While the engine is silent (a long prompt), the
stream's own progress event goes out every keepalive interval by the same timer as
over HTTP (`keepalive.py`): WebSocket frames of the protocol's own do not reach a
client's idle timer.
"""

from __future__ import annotations

import functools
from collections import OrderedDict, deque
from collections.abc import AsyncGenerator
from typing import Any

import anyio
from starlette.websockets import WebSocket, WebSocketDisconnect

from parlance.core.errors import (
    InvalidRequest,
    Overloaded,
    ParlanceError,
    PayloadTooLarge,
    ServerShuttingDown,
)
from parlance.core.stored import StoredResponse
from parlance.dialects.base import Call, CallFacts, Encoder, Frame, SocketMode, Stateful, outcome
from parlance.server.body.reader import parse_json
from parlance.server.calls.conversations import Conversations
from parlance.server.calls.framing import dumps
from parlance.server.calls.keepalive import IdleFrame, Keepalive, progress_of
from parlance.server.calls.supervision import Supervisor
from parlance.server.generation.handler import GenerationHandler
from parlance.server.generation.parlance_headers import with_parlance_headers
from parlance.server.http.access_log import CLIENT_CLOSED, AccessRecord, new_request_id, write
from parlance.server.http.auth import authorize
from parlance.server.http.refusal import refuse
from parlance.store.responses import ResponseStore

RECENT_PER_CONNECTION = 16  # latest responses a connection keeps to continue from
WAITING_LIMIT = 64  # messages waiting behind the running call


class ConnectionConversations(Conversations):
    """The store, and before it this connection's latest responses (also those not
    stored): they are found first, and gone with the connection."""

    def __init__(self, dialect: Any, store: ResponseStore, keep: int = RECENT_PER_CONNECTION):
        super().__init__(dialect, store)
        self._socket: SocketMode[Any] = dialect
        self._keep = keep
        self._recent: OrderedDict[str, StoredResponse] = OrderedDict()

    def find(self, response_id: str) -> StoredResponse | None:
        recent = self._recent.get(response_id)
        return recent if recent is not None else super().find(response_id)

    def keep(self, call: Call, response: dict[str, Any], *, pending: bool = False) -> None:
        record = self._socket.remembered(call, response)
        self._recent[record.id] = record
        self._recent.move_to_end(record.id)
        while len(self._recent) > self._keep:
            self._recent.popitem(last=False)
        super().keep(call, response, pending=pending)

    def end(self, call: Call, response: dict[str, Any]) -> None:
        record = self._socket.remembered(call, response)
        self._recent[record.id] = record
        self._recent.move_to_end(record.id)
        super().end(call, response)

    def failed(self, call: Call) -> None:
        """`call` was refused: the response it continued is no longer this connection's."""
        previous_id = self.dialect.previous_id(call)
        if previous_id is not None:
            self._recent.pop(previous_id, None)


class Inbox:
    """Client messages waiting for the call before them to end."""

    def __init__(self) -> None:
        self._waiting: deque[str | bytes] = deque()
        self._arrival = anyio.Event()

    def put(self, message: str | bytes) -> bool:
        if len(self._waiting) >= WAITING_LIMIT:
            return False
        self._waiting.append(message)
        self._arrival.set()
        return True

    async def get(self) -> str | bytes:
        while not self._waiting:
            self._arrival = anyio.Event()
            await self._arrival.wait()
        return self._waiting.popleft()


class SocketEndpoint:
    def __init__(self, handler: GenerationHandler, store: ResponseStore) -> None:
        dialect = handler.dialect
        if not isinstance(dialect, SocketMode) or not isinstance(dialect, Stateful):
            raise TypeError(f"{type(dialect).__name__} has no WebSocket mode")
        self.handler = handler
        self.dialect: SocketMode[Any] = dialect
        self.store = store

    async def serve(self, websocket: WebSocket) -> None:
        # (a draining server refuses the handshake before this: server/http/admission.py)
        try:
            authorize(websocket, self.handler.settings.api_keys)
        except ParlanceError as exc:
            await refuse(websocket.scope, websocket.receive, websocket.send,
                         self.handler.dialect.render_error, exc)
            return
        await websocket.accept()
        conversations = ConnectionConversations(self.dialect, self.store)
        inbox = Inbox()
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._listen, websocket, inbox, group.cancel_scope)
                while True:
                    await self._answer(websocket, await inbox.get(), conversations)
        except* (WebSocketDisconnect, OSError):
            pass  # the client went away while we were sending

    async def _listen(self, websocket: WebSocket, inbox: Inbox,
                      connection: anyio.CancelScope) -> None:
        """Reads while a call runs, so a client that leaves is seen at once."""
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                connection.cancel()  # the running call's stream is closed: cancelled
                return
            data = message.get("text")
            data = data if data is not None else message.get("bytes") or b""
            if not inbox.put(data):
                await self._send(websocket, self.dialect.socket_error(Overloaded(
                    f"{WAITING_LIMIT} messages are waiting for the running response "
                    "already; this one was dropped.")))

    async def _answer(self, websocket: WebSocket, message: str | bytes,
                      conversations: ConnectionConversations) -> None:
        """One client message: its call's events, or the error refusing it; one
        access line for each message that asked for a response."""
        handler = self.handler
        frames: AsyncGenerator[Frame, None]
        progress: IdleFrame | None = None
        record = AccessRecord(new_request_id())
        status = CLIENT_CLOSED
        call: Call | None = None
        try:
            drain = getattr(websocket.app.state, "drain", None)
            if drain is not None and drain.draining:
                raise ServerShuttingDown()
            raw = message.encode() if isinstance(message, str) else message
            if len(raw) > handler.settings.max_body_bytes:
                raise PayloadTooLarge("The message is larger than this server accepts "
                                      f"({handler.settings.max_body_bytes // 2**20} MiB).")
            call = await parse_json(raw, self.dialect.socket_call)
            if call is None:
                return  # an acknowledgement, not a request: no access line
            if self.dialect.prepares_only(call):
                call = conversations.recall(call)
                frames = _stream(self._prepared(call, conversations))
            else:
                supervisor = Supervisor.for_call(websocket.app, record,
                                                 handler.settings.request_timeout)
                call = with_parlance_headers(websocket, call)  # the handshake's
                started = await handler.start(call, supervisor, conversations)
                encoder: Encoder = handler.dialect.encoder(started.call, started.served)
                progress = progress_of(encoder)
                call, frames = started.call, handler.frames(started, encoder)
        except ParlanceError as exc:
            if call is not None and isinstance(exc, InvalidRequest):
                conversations.failed(call)
            write(record, websocket.scope, handler.dialect.render_error(exc).status)
            await self._send(websocket, self.dialect.socket_error(exc))
            return
        try:
            keepalive = Keepalive(handler.settings.keepalive_seconds)
            async with anyio.create_task_group() as ticks:
                if progress is not None and keepalive.interval > 0:
                    ticks.start_soon(keepalive.run, functools.partial(
                        self._show_progress, websocket, call, progress))
                async for frame in frames:
                    event = self.dialect.socket_event(call, frame)
                    if event is not None:
                        keepalive.sent()
                        await self._send(websocket, event)
                ticks.cancel_scope.cancel()
            status = 200
        finally:  # closed in this task, even when the client left (cancelled)
            with anyio.CancelScope(shield=True):
                await frames.aclose()
            write(record, websocket.scope, status)

    async def _show_progress(self, websocket: WebSocket, call: Call,
                             progress: IdleFrame) -> None:
        """The stream's progress event, when it has one now (a silent stream's fill)."""
        frame = progress()
        event = self.dialect.socket_event(call, frame) if frame is not None else None
        if event is not None:
            await self._send(websocket, event)

    def _prepared(self, call: Call, conversations: ConnectionConversations) -> list[Frame]:
        """`generate: false`: the response only records its input (for a later call to
        continue from); the model does not run."""
        spec = self.handler.models.spec(call.request.model)  # 404: no such model
        name = call.request.model or spec.id
        encoder = self.handler.dialect.encoder(call, CallFacts(name, ()))
        frames = [*encoder.open(), *encoder.close()]
        conversations.keep(call, outcome(encoder))
        return frames

    async def _send(self, websocket: WebSocket, event: dict[str, Any]) -> None:
        await websocket.send_text(dumps(event))


async def _stream(frames: list[Frame]) -> AsyncGenerator[Frame, None]:
    for frame in frames:
        yield frame
