"""Google's error envelope: `{"error": {"code", "message", "status"}}`, the status the
google.rpc name of the HTTP code."""

from __future__ import annotations

import pytest

from parlance.core.errors import (
    AuthenticationFailed,
    ContextOverflow,
    EngineFailure,
    InvalidRequest,
    ModelNotFound,
    NotImplementedHere,
    Overloaded,
    PayloadTooLarge,
    RequestTimeout,
    ServerShuttingDown,
)
from parlance.dialects.gemini import render_error


@pytest.mark.parametrize(("error", "code", "status"), [
    (InvalidRequest("bad"), 400, "INVALID_ARGUMENT"),
    (AuthenticationFailed("no key"), 401, "UNAUTHENTICATED"),
    (ModelNotFound("nope"), 404, "NOT_FOUND"),
    (Overloaded("busy", retry_after=2), 429, "RESOURCE_EXHAUSTED"),
    (ContextOverflow("too long"), 400, "INVALID_ARGUMENT"),
    (PayloadTooLarge("big"), 413, "INVALID_ARGUMENT"),
    (EngineFailure("broke"), 500, "INTERNAL"),
    (NotImplementedHere("no"), 400, "INVALID_ARGUMENT"),
    (ServerShuttingDown("bye"), 503, "UNAVAILABLE"),
    (RequestTimeout("slow"), 504, "DEADLINE_EXCEEDED"),
])
def test_statuses_have_googles_names(error, code, status):
    rendered = render_error(error)
    assert rendered.status == code
    assert rendered.body["error"]["code"] == code
    assert rendered.body["error"]["status"] == status
    assert set(rendered.body["error"]) == {"code", "message", "status"}


def test_an_unknown_model_is_said_in_geminis_words_and_retry_after_is_kept():
    assert "models/nope is not found" in render_error(ModelNotFound("nope")).body[
        "error"]["message"]
    assert render_error(Overloaded("busy", retry_after=2)).headers["retry-after"] == "2"
