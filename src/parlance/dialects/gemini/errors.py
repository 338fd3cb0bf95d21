"""Google's error envelope `{"error": {"code", "message", "status"}}`: `code` the HTTP
status, `status` the google.rpc code's name for it (Gemini API's troubleshooting
page). A failure after a stream began is the same object as the stream's last chunk,
which both SDKs raise as an API error."""

from __future__ import annotations

from typing import Any

from parlance.core.errors import (
    ContextOverflow,
    ModelNotFound,
    NotImplementedHere,
    ParlanceError,
)
from parlance.dialects.base import ErrorResponse
from parlance.dialects.shared.errors import StatusOverrides, status_of

# A feature this server lacks is a 400 INVALID_ARGUMENT, as Google answers a field a
# model does not support
STATUS: StatusOverrides = {NotImplementedHere: 400}

_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def status_name(status: int) -> str:
    """Any other 4xx is a FAILED_PRECONDITION, any other 5xx INTERNAL (502: the
    upstream's failure is this server's)."""
    return _NAMES.get(status) or ("INTERNAL" if status >= 500 else "FAILED_PRECONDITION")


def message(error: ParlanceError) -> str:
    if isinstance(error, ModelNotFound):  # Gemini's words
        return (f"models/{error.model} is not found for API version v1beta, or is not "
                "supported for generateContent.")
    if isinstance(error, ContextOverflow):
        return ("The input token count exceeds the maximum number of tokens allowed: "
                + error.message)
    return error.message


def error_body(error: ParlanceError) -> dict[str, Any]:
    status = status_of(error, STATUS)
    return {"error": {"code": status, "message": message(error),
                      "status": status_name(status)}}


def render_error(error: ParlanceError) -> ErrorResponse:
    return ErrorResponse.of(error, status_of(error, STATUS), error_body(error))
