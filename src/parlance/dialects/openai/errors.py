"""The error envelope every OpenAI endpoint answers with, `{"error": {message, type,
param, code}}`, and the statuses where OpenAI's differ from each error's own.

Chat and legacy Completions answer a prompt that overflows the context with a 403
`tokens_exceeded_error`; Responses and embeddings answer it as a 400
`invalid_request_error` with code `context_length_exceeded`, which Codex looks for
before it compacts the conversation. OpenAI's MCP connector answers a tool server
that cannot be used with a 424 `external_connector_error`, whoever's fault it is."""

from __future__ import annotations

from typing import Any

from parlance.core.errors import (
    ContextOverflow,
    InvalidRequest,
    ParlanceError,
    RequestTimeout,
    ToolServerFailed,
    ToolServerUnreachable,
)
from parlance.dialects.base import DONE, ErrorResponse, Frame
from parlance.dialects.shared.errors import StatusOverrides, status_of

STATUS: StatusOverrides = {
    ContextOverflow: 403,
    RequestTimeout: 408,
    ToolServerUnreachable: 424,
    ToolServerFailed: 424,
}

# status -> OpenAI error type; other 5xx are server_error, other 4xx invalid_request_error
_TYPES = {
    401: "authentication_error",
    403: "request_forbidden",
    408: "timeout_error",
    424: "external_connector_error",
    429: "rate_limit_error",
    501: "invalid_request_error",
}


def error_type(error: ParlanceError, status: int) -> str:
    if isinstance(error, ContextOverflow):
        return "tokens_exceeded_error"
    return _TYPES.get(status) or ("server_error" if status >= 500 else "invalid_request_error")


def error_object(error: ParlanceError) -> dict[str, Any]:
    return {"message": error.message, "type": error_type(error, status_of(error, STATUS)),
            "param": error.param, "code": error.code}


def render_error(error: ParlanceError) -> ErrorResponse:
    return ErrorResponse.of(error, status_of(error, STATUS), {"error": error_object(error)})


def error_frames(error: ParlanceError) -> list[Frame]:
    """Mid-stream failure: a bare error object (the SDK raises on it), then [DONE]."""
    return [Frame({"error": error_object(error)}), Frame(DONE)]


def in_responses_terms(error: ParlanceError) -> ParlanceError:
    """A prompt that does not fit, as Responses answers it: a 400 naming `input`."""
    if isinstance(error, ContextOverflow):
        return InvalidRequest(error.message, param="input", code="context_length_exceeded")
    return error
