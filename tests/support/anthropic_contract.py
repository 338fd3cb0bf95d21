"""Anthropic's Messages contract as the official SDK's own types check it: every stream
event (its SSE name equal to `data.type`), Message bodies and error envelopes."""

from __future__ import annotations

import json
from typing import Any

from anthropic.types import Message, RawMessageStreamEvent
from anthropic.types.beta import BetaRawMessageStreamEvent
from pydantic import TypeAdapter

_EVENT = TypeAdapter(RawMessageStreamEvent)
_BETA_EVENT = TypeAdapter(BetaRawMessageStreamEvent)  # with the `mcp_*` content blocks
ERROR_TYPES = {"invalid_request_error", "authentication_error", "permission_error",
               "not_found_error", "request_too_large", "rate_limit_error", "api_error",
               "timeout_error", "overloaded_error"}


def stream_events(body: str, *, beta: bool = False) -> list[dict[str, Any]]:
    """The events of an SSE body, each checked: named as its type, and (but for the
    in-stream `error` event) valid as the SDK's RawMessageStreamEvent (with `beta`, its
    beta events, which know the MCP connector's blocks)."""
    events = []
    for block in body.split("\n\n"):
        lines = block.split("\n")
        names = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
        data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
        if not data:
            continue
        event = json.loads("\n".join(data))
        assert names == [event["type"]], block
        if event["type"] == "error":
            check_error_object(event)
        elif event["type"] != "ping":
            (_BETA_EVENT if beta else _EVENT).validate_python(event, strict=True)
        events.append(event)
    return events


def check_message(body: dict[str, Any]) -> Message:
    return Message.model_validate(body, strict=True)


def check_error_object(body: dict[str, Any]) -> dict[str, Any]:
    assert body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] in ERROR_TYPES, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


def check_error(body: dict[str, Any]) -> dict[str, Any]:
    """A refusal's body: the envelope with a request id."""
    assert set(body) == {"type", "error", "request_id"}, body
    assert body["request_id"].startswith("req_")
    return check_error_object(body)
