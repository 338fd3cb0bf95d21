"""LM Studio's error envelope `{"error": {type, message, code?, param?}}` and the
statuses where LM Studio's differ from each error's own: a request that ran past the
server's timeout is a 408. The `type` is LM Studio's: `model_not_found`,
`not_implemented`, an MCP server's connection error by its code, `unknown` for a
busy or unavailable server, `internal_error` for what broke, else `invalid_request`."""

from __future__ import annotations

from typing import Any

from parlance.core.errors import (
    ModelNotFound,
    ParlanceError,
    RequestTimeout,
    ToolServerUnreachable,
)
from parlance.dialects.base import ErrorResponse
from parlance.dialects.shared.errors import StatusOverrides, status_of

STATUS: StatusOverrides = {RequestTimeout: 408}

# status -> LM Studio error type; any other 5xx is an internal_error, any other 4xx
# an invalid_request
_TYPES = {408: "unknown", 429: "unknown", 501: "not_implemented", 503: "unknown"}


def error_type(error: ParlanceError, status: int) -> str:
    if isinstance(error, ToolServerUnreachable):
        return error.code or "mcp_connection_error"
    if isinstance(error, ModelNotFound):
        return "model_not_found"
    if error.code == "job_not_found":
        return "job_not_found"
    return _TYPES.get(status) or ("internal_error" if status >= 500 else "invalid_request")


def error_object(error: ParlanceError) -> dict[str, Any]:
    out = {"type": error_type(error, status_of(error, STATUS)), "message": error.message}
    if error.code:
        out["code"] = error.code
    if error.param:
        out["param"] = error.param
    return out


def render_error(error: ParlanceError) -> ErrorResponse:
    return ErrorResponse.of(error, status_of(error, STATUS), {"error": error_object(error)})
