"""One access line per request on the `parlance.access` logger, and its request id.

The middleware opens each request's `AccessRecord` (id, start time), sends the id back
as `x-request-id` (the client's own when it sent a sane one) and writes the line when
the response is over. The generation handler fills in what only it knows through
`access_record(request)`: the model, the token counts, when the first output came and
the error a generation ended with. A client that left before the response was complete
is logged with status 499.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parlance.core.events import (
    Event,
    Failed,
    PromptProgress,
    ReasoningDelta,
    TextDelta,
    ToolCallStart,
    Usage,
)

log = logging.getLogger("parlance.access")

HEADER = "x-request-id"
_SANE_ID = re.compile(r"[A-Za-z0-9._:@+=/-]{1,128}")
_OUTPUT = (TextDelta, ReasoningDelta, ToolCallStart)
BODY_SEND = "parlance.body_send"
"""Scope key of a `send` below the app's own middlewares (set here: the access log is the
outermost). They look only at a response's start and its last message, so a stream's
frames in between may take this shorter way (`calls/streaming.py`): a few calls fewer
per token."""

CLIENT_CLOSED = 499  # nginx's status for a client that left before the response ended


@dataclass(slots=True)
class AccessRecord:
    request_id: str
    started: float = field(default_factory=time.perf_counter)
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    first_output: float | None = None  # perf_counter() when the first output was generated
    error: str | None = None  # the code of the error a generation ended with
    # The prompt's tokens as the engine counted them at the start: logged once the prompt
    # was evaluated (its output began, or its progress reached the end) for a stream whose
    # client left before the final usage (a client timeout on a long prompt).
    prompt_size: int | None = None

    def observe(self, event: Event) -> None:
        """Called for every event of the request's generation (cheap: per token)."""
        if self.first_output is None and isinstance(event, _OUTPUT):
            self.first_output = time.perf_counter()
            self._evaluated()
        elif isinstance(event, PromptProgress):
            if event.done >= event.total:
                self._evaluated()
        elif isinstance(event, Usage):
            self.prompt_tokens = event.prompt_tokens
            self.completion_tokens = event.completion_tokens
        elif isinstance(event, Failed):
            self.error = event.error.code or event.error.kind

    def _evaluated(self) -> None:
        if self.prompt_tokens is None:
            self.prompt_tokens = self.prompt_size


def access_record(request: Request) -> AccessRecord:
    """The request's record (a detached one when the app runs without the middleware)."""
    record = request.scope.get("state", {}).get("access")
    return record if record is not None else AccessRecord(new_request_id())


def new_request_id() -> str:
    return "req_" + secrets.token_hex(12)


def request_id(scope: Scope) -> str:
    """The client's `x-request-id` when it is a sane token, else a new one."""
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            sent = value.decode("latin-1")
            return sent if _SANE_ID.fullmatch(sent) else new_request_id()
    return new_request_id()


class AccessLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = AccessRecord(request_id(scope))
        # In place: the error handler outside this middleware sees the record too.
        scope.setdefault("state", {})["access"] = record
        # Below this middleware nothing looks at a stream's body messages but the last.
        scope[BODY_SEND] = send
        header = (HEADER.encode(), record.request_id.encode())
        status = 0
        complete = left = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, complete
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), header]}
            elif not message.get("more_body", False):
                complete = True
            await send(message)

        async def receive_noting_departure() -> Message:
            nonlocal left
            message = await receive()
            if message["type"] == "http.disconnect" and not complete:
                left = True
            return message

        try:
            await self.app(scope, receive_noting_departure, send_with_id)
        except BaseException:
            status = status or 500
            raise
        finally:
            write(record, scope, CLIENT_CLOSED if left else status)


def write(record: AccessRecord, scope: Scope, status: int) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    now = time.perf_counter()
    fields = {
        "request_id": record.request_id,
        "method": scope.get("method") or ("WS" if scope.get("type") == "websocket" else ""),
        "path": scope.get("path", ""),
        "status": status,
        "model": record.model,
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "ttft_ms": _ms(record.first_output, record.started),
        "duration_ms": _ms(now, record.started),
        "error": record.error,
    }
    line = " ".join(f"{key}={_value(value)}" for key, value in fields.items()
                    if value is not None or key != "error")
    log.info(line, extra={"access": fields})


def _ms(at: float | None, since: float) -> float | None:
    return None if at is None else round((at - since) * 1000, 1)


def _value(value: object) -> str:
    if value is None:
        return "-"
    text = str(value)
    if not text or any(c in text for c in ' "=\\') or not text.isprintable():
        return json.dumps(text)
    return text
