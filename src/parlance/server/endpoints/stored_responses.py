"""The stored-response endpoints of the Responses API: retrieve (or replay as a
stream), delete, list input items, count input tokens, cancel."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parlance.core.errors import InvalidRequest, ResourceNotFound
from parlance.core.stored import StoredResponse
from parlance.dialects.base import Call, Incoming
from parlance.dialects.openai.errors import render_error
from parlance.dialects.openai.responses import OpenAIResponses
from parlance.dialects.openai.responses.result import replay
from parlance.models.served import ServedModels
from parlance.server.body.reader import read_json
from parlance.server.calls.background import BackgroundRuns, check_cursor
from parlance.server.calls.conversations import Conversations
from parlance.server.calls.prompt_tokens import prompt_tokens
from parlance.server.calls.streaming import EventStreamResponse
from parlance.server.endpoints.answering import answering
from parlance.server.settings import ServerSettings
from parlance.store.responses import ResponseStore


class StoredResponses:
    """Each endpoint is authorized, and any refusal is answered in the OpenAI envelope,
    in one place (`server.endpoints.answering`)."""

    def __init__(self, models: ServedModels, settings: ServerSettings,
                 store: ResponseStore, dialect: OpenAIResponses, runs: BackgroundRuns) -> None:
        self.models = models
        self.settings = settings
        self.store = store
        self.dialect = dialect
        self.runs = runs
        self.conversations = Conversations(self.dialect, store)
        keys = settings.api_keys
        self.retrieve = answering(self._retrieve, keys, render_error)
        self.delete = answering(self._delete, keys, render_error)
        self.input_items = answering(self._input_items, keys, render_error)
        self.input_tokens = answering(self._input_tokens, keys, render_error)
        self.cancel = answering(self._cancel, keys, render_error)

    def _stored(self, request: Request) -> StoredResponse:
        response_id = request.path_params["response_id"]
        found = self.store.get(response_id)
        if found is None:
            raise ResourceNotFound(f"No response found with id '{response_id}'.",
                                   param="response_id", code="not_found")
        return found

    async def _retrieve(self, request: Request) -> Response | EventStreamResponse:
        """The response as last stored (a background one: as its status last changed),
        or its stream: a background response's as it was sent, followed live while it
        runs; any other's replayed from what was stored."""
        stored = self._stored(request)
        after = _int_param(request, "starting_after", None)
        if request.query_params.get("stream", "false").lower() != "true":
            return JSONResponse(stored.response)
        run = self.runs.find(stored.id)
        if run is not None:
            return EventStreamResponse(run.follow(after), framing=self.dialect.framing,
                                       keepalive_seconds=self.settings.keepalive_seconds,
                                       on_close=lambda: None)
        frames = replay(stored.response, None)
        if after is not None:  # a frame's sequence number is its place; [DONE] is last
            frames = frames[check_cursor(after, len(frames) - 1) + 1:]
        return EventStreamResponse(frames, framing=self.dialect.framing,
                                   keepalive_seconds=0, on_close=lambda: None)

    async def _delete(self, request: Request) -> Response:
        stored = self._stored(request)
        run = self.runs.find(stored.id)
        if run is not None:
            await run.cancel()  # a running background response stops first
        self.store.delete(stored.id)
        return JSONResponse({"id": stored.id, "object": "response", "deleted": True})

    async def _input_items(self, request: Request) -> Response:
        stored = self._stored(request)
        limit = _int_param(request, "limit", 20)
        if not 1 <= limit <= 100:
            raise InvalidRequest("limit must be between 1 and 100.", param="limit")
        order = request.query_params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise InvalidRequest("order must be 'asc' or 'desc'.", param="order")
        items = stored.context if order == "asc" else stored.context[::-1]
        after = request.query_params.get("after")
        if after is not None:
            ids = [item.get("id") for item in items]
            if after not in ids:
                raise InvalidRequest(f"No input item with id '{after}'.", param="after")
            items = items[ids.index(after) + 1:]
        page = items[:limit]
        return JSONResponse({"object": "list", "data": page,
                             "first_id": page[0]["id"] if page else None,
                             "last_id": page[-1]["id"] if page else None,
                             "has_more": len(items) > limit})

    async def _input_tokens(self, request: Request) -> Response:
        call = self.conversations.recall(await read_json(
            request, self.settings.max_body_bytes, self._parse_for_count))
        count = await prompt_tokens(request, self.models, self.settings, call)
        return JSONResponse({"object": "response.input_tokens", "input_tokens": count})

    def _parse_for_count(self, body: Any) -> Call:
        """The body as a Responses request that is neither streamed nor run in the background."""
        if isinstance(body, dict):
            body = {**body, "stream": False, "background": False}
        return self.dialect.parse(Incoming(body))

    async def _cancel(self, request: Request) -> Response:
        """Stop a background response; one that has finished is answered as it is."""
        stored = self._stored(request)
        if not stored.response.get("background"):
            raise InvalidRequest("Only background responses can be cancelled.",
                                 param="response_id")
        run = self.runs.find(stored.id)
        if run is not None:
            await run.cancel()
            stored = self._stored(request)
        return JSONResponse(stored.response)


def _int_param(request: Request, name: str, default: int | None) -> Any:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise InvalidRequest(f"{name} must be an integer.", param=name) from exc
