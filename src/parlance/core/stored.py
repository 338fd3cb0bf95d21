"""A stored response as stateful dialects read and write it: a neutral value, so that
dialects decide what to keep without knowing the store (`store/responses.py` keeps it
in SQLite)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RESPONSE = "response"  # the kind OpenAI Responses stores


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """The response object as last rendered, and every input item the model saw (the
    chain of earlier turns plus this request's input). `kind` says which API stored
    it ("response" for OpenAI Responses, "chat" for LM Studio chats): each continues
    only its own."""

    id: str
    response: dict[str, Any]
    context: list[dict[str, Any]]  # input items (Responses: each with an id)
    kind: str = RESPONSE
    pending: bool = False  # stored while it still runs
