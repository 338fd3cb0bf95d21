"""Ollama's error envelope `{"error": "message"}` and statuses (its `server/routes.go`):
400 for bad input, 404 `model 'x' not found` for an unknown model, 503 when the queue
is full, 500 for what broke on the server. A failure after the stream began is a last
NDJSON line `{"error": "message"}` inside the 200 response."""

from __future__ import annotations

from parlance.core.errors import ModelNotFound, NotImplementedHere, Overloaded, ParlanceError
from parlance.dialects.base import ErrorResponse, Frame
from parlance.dialects.shared.errors import StatusOverrides, status_of

# Ollama answers a full queue with 503 (ErrMaxQueue) and a feature a model lacks
# ("does not support thinking") with 400.
STATUS: StatusOverrides = {Overloaded: 503, NotImplementedHere: 400}


def message(error: ParlanceError) -> str:
    """The `error` text: Ollama's own words where clients look for them."""
    if isinstance(error, ModelNotFound):
        return f"model '{error.model}' not found"
    return error.message


def render_error(error: ParlanceError) -> ErrorResponse:
    return ErrorResponse.of(error, status_of(error, STATUS), {"error": message(error)})


def error_line(error: ParlanceError) -> Frame:
    """A failure mid-stream: the stream's last line."""
    return Frame({"error": message(error)})
