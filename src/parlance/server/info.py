"""Plain JSON endpoints: health and the OpenAI model list."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parlance.core.errors import ParlanceError
from parlance.dialects.openai_common import render_error
from parlance.models.served import ServedModel, ServedModels
from parlance.server.auth import authorize
from parlance.server.handler import ServerSettings, error_json


def _model_object(model: ServedModel, shown_id: str) -> dict[str, Any]:
    return {"id": shown_id, "object": "model", "created": model.created, "owned_by": "parlance"}


class InfoEndpoints:
    def __init__(self, models: ServedModels, settings: ServerSettings) -> None:
        self.models = models
        self.settings = settings

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def list_models(self, request: Request) -> Response:
        try:
            authorize(request, self.settings.api_keys)
        except ParlanceError as exc:
            return error_json(render_error(exc))
        data = [_model_object(m, m.spec.id) for m in self.models]
        return JSONResponse({"object": "list", "data": data})

    async def get_model(self, request: Request) -> Response:
        try:
            authorize(request, self.settings.api_keys)
            model, shown = self.models.resolve(request.path_params["model_id"] or "\0")
        except ParlanceError as exc:
            return error_json(render_error(exc))
        return JSONResponse(_model_object(model, shown))
