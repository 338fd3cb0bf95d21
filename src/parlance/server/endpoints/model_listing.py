"""The one model-list endpoint behind an API's own listing (Gemini's `GET models`,
`GET models/{model}`): every model a request may name, loaded or not, each described
from its facts (its file's header, read off the event loop), in the API's shapes."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request

from parlance.dialects.api import ModelListing
from parlance.models.facts import facts_of
from parlance.models.served import ServedModels
from parlance.server.endpoints.answering import answering
from parlance.server.openapi.operation import Operation
from parlance.server.settings import ServerSettings


class ModelList:
    """`one`: the route names one model (its `{model}` parameter), else every model."""

    def __init__(self, listing: ModelListing, models: ServedModels, settings: ServerSettings,
                 tag: str, *, one: bool) -> None:
        self.listing = listing
        self.models = models
        self.tag = tag  # the API it belongs to
        self.one = one
        self._answer = answering(self._one if one else self._every, settings.api_keys,
                                 listing.render_error)

    def operation(self) -> Operation:
        """What `/openapi.json` says of this route."""
        return Operation(self.tag, "A model" if self.one else "The models",
                         (self.listing.render_error,))

    async def answer(self, request: Request) -> Any:
        return await self._answer(request)

    async def _every(self, request: Request) -> dict[str, Any]:
        specs = self.models.available()

        def objects() -> list[dict[str, Any]]:
            return [self.listing.model_object(spec.id, facts_of(spec)) for spec in specs]

        return self.listing.model_list(await asyncio.to_thread(objects))

    async def _one(self, request: Request) -> dict[str, Any]:
        params = request.path_params  # (`model_id` where OpenAI's route is shared)
        requested = (params.get("model") or params.get("model_id") or "").removeprefix(
            "models/") or "\0"
        spec = self.models.spec(requested)  # ModelNotFound when no model has that name
        return self.listing.model_object(requested, await asyncio.to_thread(facts_of, spec))
