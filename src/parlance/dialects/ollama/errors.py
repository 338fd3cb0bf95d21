"""Ollama's error envelope `{"error": "message"}` and statuses (its `server/routes.go`):
400 for bad input, 404 `model 'x' not found` for an unknown model, 503 when the queue
is full, 500 for what broke on the server. A failure after the stream began is a last
NDJSON line `{"error": "message"}` inside the 200 response."""

from __future__ import annotations

from parlance.core.errors import ModelNotFound, ParlanceError, ToolServerUnreachable
from parlance.dialects.base import ErrorResponse, Frame

# kind -> HTTP status. Ollama answers a full queue with 503 (ErrMaxQueue) and a feature a
# model lacks ("does not support thinking") with 400.
_STATUS = {
    "invalid_request": 400,
    "payload_too_large": 413,
    "authentication": 401,
    "forbidden": 403,
    "model_not_found": 404,
    "route_not_found": 404,
    "not_found": 404,
    "method_not_allowed": 405,
    "context_overflow": 400,
    "overloaded": 503,
    "unavailable": 503,
    "timeout": 504,
    "tool_server": 500,
    "not_implemented": 400,
    "engine_failure": 500,
    "upstream_failure": 502,
    "internal": 500,
}


def message(error: ParlanceError) -> str:
    """The `error` text: Ollama's own words where clients look for them."""
    if isinstance(error, ModelNotFound):
        return f"model '{error.model}' not found"
    return error.message


def status(error: ParlanceError) -> int:
    if isinstance(error, ToolServerUnreachable) and not error.server_fault:
        return 400
    return _STATUS.get(error.kind, 500)


def render_error(error: ParlanceError) -> ErrorResponse:
    return ErrorResponse.of(error, status(error), {"error": message(error)})


def error_line(error: ParlanceError) -> Frame:
    """A failure mid-stream: the stream's last line."""
    return Frame({"error": message(error)})
