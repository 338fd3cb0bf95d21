"""Anthropic's error envelope `{"type": "error", "error": {type, message}, "request_id"}`
and statuses. A prompt that overflows the context is a 400 whose message starts with
"prompt is too long", the words Claude Code looks for before it compacts."""

from __future__ import annotations

import secrets
from typing import Any

from parlance.core.errors import Overloaded, ParlanceError, ToolServerUnreachable
from parlance.dialects.base import ErrorResponse, Frame

# kind -> (HTTP status, Anthropic error type). A full queue is 529 (Claude Code retries it).
_ERRORS = {
    "invalid_request": (400, "invalid_request_error"),
    "payload_too_large": (413, "request_too_large"),
    "authentication": (401, "authentication_error"),
    "forbidden": (403, "permission_error"),
    "model_not_found": (404, "not_found_error"),
    "route_not_found": (404, "not_found_error"),
    "not_found": (404, "not_found_error"),
    "method_not_allowed": (405, "invalid_request_error"),
    "context_overflow": (400, "invalid_request_error"),
    "overloaded": (529, "overloaded_error"),
    "unavailable": (503, "api_error"),
    "timeout": (504, "timeout_error"),
    "tool_server": (500, "api_error"),
    "not_implemented": (400, "invalid_request_error"),
    "engine_failure": (500, "api_error"),
    "upstream_failure": (502, "api_error"),
    "internal": (500, "api_error"),
}

PROMPT_TOO_LONG = "prompt is too long"


def new_request_id() -> str:
    return "req_" + secrets.token_hex(12)


def _status(error: ParlanceError) -> int:
    """An MCP server the request named that cannot be used (not allowed, refused by the
    address guard, unreachable) is the request's fault: a 400 invalid_request_error."""
    if isinstance(error, ToolServerUnreachable) and not error.server_fault:
        return 400
    return _ERRORS.get(error.kind, _ERRORS["internal"])[0]


def error_object(error: ParlanceError) -> dict[str, Any]:
    kind = "invalid_request_error" if _status(error) == 400 else _ERRORS.get(
        error.kind, _ERRORS["internal"])[1]
    message = error.message
    if error.kind == "context_overflow":
        message = f"{PROMPT_TOO_LONG}: {message}"
    return {"type": kind, "message": message}


def render_error(error: ParlanceError) -> ErrorResponse:
    status = _status(error)
    request_id = new_request_id()
    rendered = ErrorResponse.of(error, status, {"type": "error", "error": error_object(error),
                                                "request_id": request_id})
    rendered.headers["request-id"] = request_id
    return rendered


def error_frame(error: ParlanceError) -> Frame:
    """A failure after the stream began: `event: error` inside the 200 response, typed
    overloaded_error or api_error as Anthropic's own streams do."""
    kind = "overloaded_error" if isinstance(error, Overloaded) else "api_error"
    return Frame({"type": "error", "error": {"type": kind, "message": error.message}},
                 event="error")
