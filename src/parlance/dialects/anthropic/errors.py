"""Anthropic's error envelope `{"type": "error", "error": {type, message}, "request_id"}`
and the statuses where Anthropic's differ from each error's own. A prompt that
overflows the context is a 400 whose message starts with "prompt is too long", the
words Claude Code looks for before it compacts."""

from __future__ import annotations

import secrets
from typing import Any

from parlance.core.errors import (
    ContextOverflow,
    NotImplementedHere,
    Overloaded,
    ParlanceError,
)
from parlance.dialects.base import ErrorResponse, Frame
from parlance.dialects.shared.errors import StatusOverrides, status_of

# A full queue is 529 overloaded_error (Claude Code retries it); a feature this server
# lacks is a 400 invalid_request_error, as Anthropic answers an unsupported parameter.
STATUS: StatusOverrides = {Overloaded: 529, NotImplementedHere: 400}

# status -> Anthropic error type, as Anthropic documents them; any other 4xx is an
# invalid_request_error, any other 5xx an api_error
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}

PROMPT_TOO_LONG = "prompt is too long"


def new_request_id() -> str:
    return "req_" + secrets.token_hex(12)


def error_type(status: int) -> str:
    return _TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")


def error_object(error: ParlanceError) -> dict[str, Any]:
    message = error.message
    if isinstance(error, ContextOverflow):
        message = f"{PROMPT_TOO_LONG}: {message}"
    return {"type": error_type(status_of(error, STATUS)), "message": message}


def render_error(error: ParlanceError) -> ErrorResponse:
    status = status_of(error, STATUS)
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
