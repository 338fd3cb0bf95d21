"""Plain JSON endpoints: health and the OpenAI model list."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parlance.dialects.openai_common import render_error
from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModels
from parlance.server.endpoints import answering
from parlance.server.handler import ServerSettings


def _model_object(shown_id: str, created: int) -> dict[str, Any]:
    return {"id": shown_id, "object": "model", "created": created, "owned_by": "parlance"}


def _created(spec: ModelSpec) -> int:
    """When a model that is not loaded came to be: its file's modification time."""
    try:
        return int(spec.locate().stat().st_mtime)
    except (OSError, LookupError, ValueError):
        return 0


class InfoEndpoints:
    def __init__(self, models: ServedModels, settings: ServerSettings) -> None:
        self.models = models
        self.settings = settings
        self.list_models = answering(self._list_models, settings.api_keys, render_error)
        self.get_model = answering(self._get_model, settings.api_keys, render_error)

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def _list_models(self, request: Request) -> dict[str, Any]:
        """Every model a request may name, loaded or not: models load on first use
        (LM Studio lists its downloaded models here too when it loads just in time)."""
        loaded = {m.spec.id: m.created for m in self.models}
        data = [_model_object(spec.id, loaded.get(spec.id) or _created(spec))
                for spec in self.models.available()]
        return {"object": "list", "data": data}

    async def _get_model(self, request: Request) -> dict[str, Any]:
        requested = request.path_params["model_id"] or "\0"
        if self.models.is_loaded(requested):
            model, shown = self.models.resolve(requested)
            return _model_object(shown, model.created)
        return _model_object(requested, _created(self.models.spec(requested)))
