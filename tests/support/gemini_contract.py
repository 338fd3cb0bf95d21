"""What Gemini's clients parse, as checkers: the error object `{"error": {code,
message, status}}`, and a streamGenerateContent stream (SSE `data:` lines without event
names or `[DONE]`, or one JSON array) whose every chunk is a GenerateContentResponse and
whose last one finishes each candidate or is an error."""

from __future__ import annotations

import json
from typing import Any

GOOGLE_STATUSES = {"INVALID_ARGUMENT", "FAILED_PRECONDITION", "UNAUTHENTICATED",
                   "PERMISSION_DENIED", "NOT_FOUND", "DEADLINE_EXCEEDED", "ABORTED",
                   "RESOURCE_EXHAUSTED", "CANCELLED", "INTERNAL", "UNIMPLEMENTED",
                   "UNAVAILABLE"}


def check_error(body: Any) -> dict[str, Any]:
    assert isinstance(body, dict) and set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "status"}, error
    assert isinstance(error["code"], int) and isinstance(error["message"], str), error
    assert error["message"] and error["status"] in GOOGLE_STATUSES, error
    return error


def stream_chunks(text: str, *, sse: bool) -> list[dict[str, Any]]:
    """The chunks of a stream, after checking its framing and that it ended by contract."""
    if sse:
        frames = text.split("\n\n")
        assert frames[-1] == "", text[-300:]
        chunks = []
        for frame in frames[:-1]:
            if frame.startswith(":"):  # a keepalive comment
                continue
            assert frame.startswith("data: ") and "\n" not in frame, frame[:300]
            chunks.append(json.loads(frame.removeprefix("data: ")))
    else:
        chunks = json.loads(text)
        assert isinstance(chunks, list), text[:300]
    assert chunks, text[:300]
    last = chunks[-1]
    if "error" in last:
        check_error(last)
        return chunks
    for chunk in chunks:
        assert chunk["modelVersion"] and chunk["responseId"], chunk
        assert "promptTokenCount" in chunk["usageMetadata"], chunk
        for candidate in chunk["candidates"]:
            assert candidate["content"]["role"] == "model", candidate
    assert all("finishReason" in c for c in last["candidates"]), last
    return chunks
