"""The web chat's conversations (`/parlance/conversations`), kept by the server so that
every browser sees the same list: list and search, read (which is also the export),
create or import, replace, rename, delete. Under the API key, in OpenAI's error
envelope; the document is checked for the shape the page writes (a tree of messages)
and for size, and otherwise kept as given.

    GET    /parlance/conversations?q=&limit=&offset=   {"data": [summary…], "has_more"}
    POST   /parlance/conversations                     a document, or {"conversations": […]}
    GET    /parlance/conversations/{id}                the document
    PUT    /parlance/conversations/{id}                the document, replaced
    PATCH  /parlance/conversations/{id}                {"title": "…"}
    DELETE /parlance/conversations/{id}
"""

from __future__ import annotations

import secrets
from typing import Any

from starlette.requests import Request

from parlance.core.errors import InvalidRequest, PayloadTooLarge, ResourceNotFound
from parlance.dialects.openai.errors import render_error
from parlance.dialects.shared.wire import parse_body
from parlance.server.body.conversation_shapes import (
    MAX_TITLE,
    DocumentShape,
    ImportShape,
    RenameShape,
)
from parlance.server.body.reader import read_json
from parlance.server.endpoints.answering import answering
from parlance.server.settings import ServerSettings
from parlance.store.conversations import ConversationStore, ConversationSummary, encoded_size

ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def summary_json(summary: ConversationSummary) -> dict[str, Any]:
    return {"id": summary.id, "object": "conversation", "title": summary.title,
            "created_at": summary.created_at, "updated_at": summary.updated_at}


class ConversationEndpoints:
    def __init__(self, settings: ServerSettings, store: ConversationStore) -> None:
        self.settings = settings
        self.store = store
        keys = settings.api_keys
        self.list = answering(self._list, keys, render_error)
        self.create = answering(self._create, keys, render_error)
        self.retrieve = answering(self._retrieve, keys, render_error)
        self.replace = answering(self._replace, keys, render_error)
        self.rename = answering(self._rename, keys, render_error)
        self.delete = answering(self._delete, keys, render_error)

    async def _list(self, request: Request) -> dict[str, Any]:
        query = request.query_params.get("q", "")[:MAX_TITLE]
        limit = _bounded_int(request, "limit", 100, 1, 1000)
        offset = _bounded_int(request, "offset", 0, 0, 10**9)
        found = self.store.list(query, limit + 1, offset)
        return {"object": "list", "data": [summary_json(s) for s in found[:limit]],
                "has_more": len(found) > limit}

    async def _create(self, request: Request) -> dict[str, Any]:
        body: Any = await read_json(request, self.settings.max_body_bytes)
        if isinstance(body, dict) and "conversations" in body:
            many = parse_body(ImportShape, body).conversations
            return {"object": "list", "data": [summary_json(self._keep(d, None)) for d in
                                               [_checked(d) for d in many]]}
        return summary_json(self._keep(_checked(body), None))

    async def _retrieve(self, request: Request) -> dict[str, Any]:
        summary, document = self._found(request)
        return {**document, **summary_json(summary)}

    async def _replace(self, request: Request) -> dict[str, Any]:
        conversation_id = _path_id(request)
        document = _checked(await read_json(request, self.settings.max_body_bytes))
        return summary_json(self._keep(document, conversation_id))

    async def _rename(self, request: Request) -> dict[str, Any]:
        title = parse_body(RenameShape, await read_json(request, 64 * 1024)).title
        renamed = self.store.rename(_path_id(request), title.strip())
        if renamed is None:
            raise _not_found(_path_id(request))
        return summary_json(renamed)

    async def _delete(self, request: Request) -> dict[str, Any]:
        conversation_id = _path_id(request)
        if not self.store.delete(conversation_id):
            raise _not_found(conversation_id)
        return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}

    def _found(self, request: Request) -> tuple[ConversationSummary, dict[str, Any]]:
        found = self.store.get(_path_id(request))
        if found is None:
            raise _not_found(_path_id(request))
        return found

    def _keep(self, document: dict[str, Any], conversation_id: str | None
              ) -> ConversationSummary:
        conversation_id = conversation_id or document.get("id") or new_id()
        _check_id(conversation_id, "id")
        if encoded_size(document) > self.store.max_document_bytes:
            raise PayloadTooLarge(
                f"A conversation may be at most {self.store.max_document_bytes // 2**20} "
                f"MiB of JSON.")
        kept = {key: value for key, value in document.items()
                if key not in ("id", "object", "title", "created_at", "updated_at")}
        previous = self.store.summary(conversation_id)
        created = previous.created_at if previous else document.get("created_at")
        return self.store.put(conversation_id, str(document.get("title") or "").strip(),
                              kept, created)


def new_id() -> str:
    return "conv_" + secrets.token_hex(12)


def _checked(body: Any) -> dict[str, Any]:
    """The document as given, once its shape is known good: messages with ids, known
    roles, and parents that are earlier messages (a tree, never a loop)."""
    shape = parse_body(DocumentShape, body)
    seen: set[str] = set()
    for index, message in enumerate(shape.messages):
        if message.id in seen:
            raise InvalidRequest(f"Two messages have the id '{message.id}'.",
                                 param=f"messages[{index}].id", code="invalid_conversation")
        if message.parent is not None and message.parent not in seen:
            raise InvalidRequest(
                f"Message '{message.id}' names a parent that is not an earlier message.",
                param=f"messages[{index}].parent", code="invalid_conversation")
        seen.add(message.id)
    assert isinstance(body, dict)  # parse_body accepted it as an object
    return body


def _path_id(request: Request) -> str:
    conversation_id: str = request.path_params["conversation_id"]
    _check_id(conversation_id, "conversation_id")
    return conversation_id


def _check_id(conversation_id: str, param: str) -> None:
    if not (0 < len(conversation_id) <= 100 and set(conversation_id) <= ID_CHARS):
        raise InvalidRequest("A conversation id is 1 to 100 letters, digits, '_' or '-'.",
                             param=param, code="invalid_conversation_id")


def _not_found(conversation_id: str) -> ResourceNotFound:
    return ResourceNotFound(f"No conversation found with id '{conversation_id}'.",
                            param="conversation_id", code="not_found")


def _bounded_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise InvalidRequest(f"'{name}' must be an integer from {low} to {high}.",
                             param=name, code="invalid_value")
    return int(raw)
