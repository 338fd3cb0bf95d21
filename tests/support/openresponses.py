"""The second oracle for the Responses API: the Open Responses specification's typed
models (PyPI `openresponses-types`), validated in pydantic's strict mode."""

from __future__ import annotations

import json
from typing import Any

from openresponses_types import types as spec
from pydantic import BaseModel


def _event_models() -> dict[str, type[BaseModel]]:
    models = {}
    for name in dir(spec):
        model = getattr(spec, name)
        if (isinstance(model, type) and issubclass(model, BaseModel)
                and name.endswith("StreamingEvent") and "type" in model.model_fields):
            kind = model.model_fields["type"].annotation
            for member in getattr(kind, "__members__", {}).values():
                models[member.value] = model
    return models


EVENT_MODELS = _event_models()

# Where the OpenAI SDK and the Open Responses specification disagree. Parlance
# sends what the OpenAI SDK expects; the specification's model is checked under
# its own name.
SPEC_EVENT_NAMES = {
    "response.reasoning_text.delta": "response.reasoning.delta",
    "response.reasoning_text.done": "response.reasoning.done",
}


def check_response(response: dict[str, Any]) -> None:
    spec.ResponseResource.model_validate_json(json.dumps(response), strict=True)


def check_event(event: dict[str, Any]) -> None:
    kind = SPEC_EVENT_NAMES.get(event["type"], event["type"])
    EVENT_MODELS[kind].model_validate_json(json.dumps({**event, "type": kind}), strict=True)
    if "response" in event:
        check_response(event["response"])


def checked_events(text: str) -> list[tuple[str, Any]]:
    """(event name, data) per SSE frame of a Responses stream, [DONE] as ("", "[DONE]");
    every event is checked against the specification on the way."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        data: Any = lines.get("data", "")
        if data != "[DONE]":
            data = json.loads(data)
            check_event(data)
        out.append((lines.get("event", ""), data))
    return out
