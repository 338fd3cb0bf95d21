"""Anthropic's model objects and list page (`GET /v1/models` with `anthropic-version`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def model_object(model_id: str, created: int) -> dict[str, Any]:
    stamp = datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": "model", "id": model_id, "display_name": model_id, "created_at": stamp,
            "lifecycle": "active"}


def model_list(models: list[tuple[str, int]]) -> dict[str, Any]:
    """Every model on one page: `(id, created)` pairs, in order."""
    data = [model_object(model_id, created) for model_id, created in models]
    return {"data": data, "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}
