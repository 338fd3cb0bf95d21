"""WebSocket mode of `/v1/responses` (OpenAI's Responses WebSocket mode, the Open
Responses WebSocket transport), the pure half. A `response.create` message is the body
of `POST /v1/responses` plus its `type` (and an optional `stream_id` lane, echoed on
every event); streaming is implicit and `background` is refused. The events are the
SSE stream's, one message each, without `[DONE]`. A message refused before its stream
starts is answered by an `error` event carrying the HTTP status it would have had.
`response.processed` (a client's acknowledgement, sent by Codex) needs no answer."""

from __future__ import annotations

from typing import Any

from parlance.core.errors import InvalidRequest, ParlanceError
from parlance.dialects.base import Frame
from parlance.dialects.openai.errors import render_error

CREATE = "response.create"
ACKNOWLEDGEMENTS = frozenset({"response.processed"})


def create_message(message: Any) -> tuple[dict[str, Any], str | None, bool] | None:
    """(the request body, its lane, whether to generate) of a `response.create`;
    None for a message that needs no answer."""
    if not isinstance(message, dict):
        raise InvalidRequest("A WebSocket message must be a JSON object.", code="invalid_json")
    kind = message.get("type")
    if kind in ACKNOWLEDGEMENTS:
        return None
    if kind != CREATE:
        raise InvalidRequest(f"Unsupported message type {kind!r}: this server takes "
                             f"'{CREATE}' messages.", param="type", code="invalid_value")
    if message.get("background"):
        raise InvalidRequest("background is not supported over WebSocket; send the request "
                             "with POST /v1/responses.", param="background",
                             code="unsupported_parameter")
    lane = message.get("stream_id")
    if lane is not None and not isinstance(lane, str):
        raise InvalidRequest("stream_id must be a string.", param="stream_id",
                             code="invalid_type")
    generate = message.get("generate", True)
    if not isinstance(generate, bool):
        raise InvalidRequest("generate must be a boolean.", param="generate",
                             code="invalid_type")
    body = {k: v for k, v in message.items() if k not in ("type", "stream_id", "generate")}
    return {**body, "stream": True}, lane, generate


def event(frame: Frame, lane: str | None) -> dict[str, Any] | None:
    if not isinstance(frame.data, dict):
        return None  # [DONE]: a WebSocket stream ends at its terminal event
    return frame.data if lane is None else {**frame.data, "stream_id": lane}


def error_event(error: ParlanceError, lane: str | None = None) -> dict[str, Any]:
    rendered = render_error(error)
    body = rendered.body["error"]
    detail = {**body, "code": body["code"] or body["type"]}  # the transport requires a code
    if rendered.headers:
        detail["headers"] = rendered.headers
    out = {"type": "error", "status": rendered.status, "error": detail}
    return out if lane is None else {**out, "stream_id": lane}
