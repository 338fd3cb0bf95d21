"""llama-server's error envelope, `{"error": {"code": <status>, "message", "type"}}`, which
its own endpoints answer with (System One, tokenize, infill, rerank): the type by
status, as its `format_error_response` names them."""

from __future__ import annotations

from parlance.core.errors import ContextOverflow, InvalidRequest, ParlanceError
from parlance.dialects.base import ErrorResponse
from parlance.dialects.shared.errors import status_of

UNPROCESSABLE = "unprocessable_entity"  # an InvalidRequest with this code is a 422

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          413: "request_too_large_error", 422: "unprocessable_entity_error",
          429: "rate_limit_error", 501: "not_supported_error", 503: "unavailable_error"}


def render_error(error: ParlanceError) -> ErrorResponse:
    status = 422 if isinstance(error, InvalidRequest) and error.code == UNPROCESSABLE else (
        status_of(error, {ContextOverflow: 400}))
    kind = ("exceed_context_size_error" if isinstance(error, ContextOverflow)
            else _TYPES.get(status) or ("server_error" if status >= 500
                                        else "invalid_request_error"))
    return ErrorResponse.of(error, status,
                            {"error": {"code": status, "message": error.message, "type": kind}})
