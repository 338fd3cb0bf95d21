"""The web chat's conversation API (`endpoints/conversations.py`): its path, and the
shapes its bodies are checked against. Here, below the endpoints, because the OpenAPI
document (`openapi/route_docs.py`) describes the routes with them too."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from parlance.dialects.shared.wire import WireModel

PATH = "/parlance/conversations"
MAX_TITLE = 200
MAX_IMPORT = 500


class MessageShape(WireModel):
    """What the page needs of a message; everything else it wrote is kept as is."""
    id: str = Field(min_length=1, max_length=100)
    parent: str | None = None
    role: Literal["user", "assistant", "system"]


class DocumentShape(WireModel):
    id: str | None = Field(default=None, min_length=1, max_length=100)
    title: str = Field(default="", max_length=MAX_TITLE)
    created_at: float | None = None
    messages: list[MessageShape] = Field(default_factory=list)


class ImportShape(WireModel):
    conversations: list[dict[str, Any]] = Field(max_length=MAX_IMPORT)


class RenameShape(WireModel):
    title: str = Field(max_length=MAX_TITLE)
