"""A client's side of the Responses API's WebSocket mode: send a message, read its
events, each checked against the openai SDK's server events and the Open Responses
types (strictly)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from openai._models import validate_type
from openai.types.responses import ResponsesServerEvent
from openresponses_types import types as spec
from websockets.asyncio.client import ClientConnection

from tests.support.openresponses import check_event

TERMINAL = {"response.completed", "response.failed", "response.incomplete"}
WAIT = 30.0  # generous: a busy machine


def checked(event: dict[str, Any]) -> dict[str, Any]:
    """The event, valid for both oracles."""
    validate_type(type_=ResponsesServerEvent, value=event)  # type: ignore[arg-type]
    if event["type"] == "error":
        spec.WebSocketErrorEvent.model_validate_json(json.dumps(event), strict=True)
    else:
        check_event({k: v for k, v in event.items() if k != "stream_id"})
    return event


async def receive(ws: ClientConnection) -> dict[str, Any]:
    return checked(json.loads(await asyncio.wait_for(ws.recv(), WAIT)))


async def response(ws: ClientConnection, message: dict[str, Any]) -> list[dict[str, Any]]:
    """Send one message; its events up to the terminal one (or its error)."""
    await ws.send(json.dumps(message))
    events = [await receive(ws)]
    while events[-1]["type"] not in TERMINAL | {"error"}:
        events.append(await receive(ws))
    return events
