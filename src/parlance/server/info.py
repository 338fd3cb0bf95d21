"""Plain JSON endpoints: health and the OpenAI model list."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parlance.dialects.openai_common import render_error
from parlance.models.served import ServedModel, ServedModels
from parlance.server.endpoints import answering
from parlance.server.handler import ServerSettings


def _model_object(model: ServedModel, shown_id: str) -> dict[str, Any]:
    return {"id": shown_id, "object": "model", "created": model.created, "owned_by": "parlance"}


class InfoEndpoints:
    def __init__(self, models: ServedModels, settings: ServerSettings) -> None:
        self.models = models
        self.settings = settings
        self.list_models = answering(self._list_models, settings.api_keys, render_error)
        self.get_model = answering(self._get_model, settings.api_keys, render_error)

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def _list_models(self, request: Request) -> dict[str, Any]:
        data = [_model_object(m, m.spec.id) for m in self.models]
        return {"object": "list", "data": data}

    async def _get_model(self, request: Request) -> dict[str, Any]:
        model, shown = self.models.resolve(request.path_params["model_id"] or "\0")
        return _model_object(model, shown)
