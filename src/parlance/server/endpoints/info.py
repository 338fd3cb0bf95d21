"""Plain JSON endpoints: health and the model list, in OpenAI's shape or, for a request
carrying `anthropic-version`, in Anthropic's, or for a request carrying another API's
client headers (`ModelRoutes.headers`: Gemini's SDKs ask `GET /v1/models`), in its."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from parlance.core.errors import ParlanceError
from parlance.dialects import anthropic
from parlance.dialects.anthropic import models as anthropic_models
from parlance.dialects.base import ErrorResponse
from parlance.dialects.openai import errors as openai_errors
from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModels
from parlance.server.endpoints.answering import answering
from parlance.server.endpoints.model_listing import ModelList
from parlance.server.settings import ServerSettings


def _model_object(shown_id: str, created: int) -> dict[str, Any]:
    return {"id": shown_id, "object": "model", "created": created, "owned_by": "parlance"}


def _anthropic(request: Request) -> bool:
    return "anthropic-version" in request.headers


def _envelope(request: Request) -> Callable[[ParlanceError], ErrorResponse]:
    return anthropic.render_error if _anthropic(request) else openai_errors.render_error


def _created(spec: ModelSpec) -> int:
    """When a model that is not loaded came to be: its file's modification time."""
    try:
        return int(spec.locate().stat().st_mtime)
    except (OSError, LookupError, ValueError):
        return 0


class InfoEndpoints:
    def __init__(self, models: ServedModels, settings: ServerSettings,
                 claimed: tuple[tuple[tuple[str, ...], ModelList, ModelList], ...] = ()) -> None:
        """`claimed`: the model lists of other APIs whose clients ask `/v1/models` (their
        headers, their list, one model)."""
        self.models = models
        self.settings = settings
        self.claimed = claimed
        keys, render_error = settings.api_keys, openai_errors.render_error
        self._list = answering(self._list_models, keys, render_error, _envelope)
        self._get = answering(self._get_model, keys, render_error, _envelope)

    async def list_models(self, request: Request) -> Any:
        for headers, every, _ in self.claimed:
            if any(h in request.headers for h in headers):
                return await every.answer(request)
        return await self._list(request)

    async def get_model(self, request: Request) -> Any:
        for headers, _, one in self.claimed:
            if any(h in request.headers for h in headers):
                return await one.answer(request)
        return await self._get(request)

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def root(self, request: Request) -> Response:
        """`HEAD /` or `GET /`: the liveness probe Claude Code and Ollama apps send."""
        return PlainTextResponse("Parlance is running")

    async def _list_models(self, request: Request) -> dict[str, Any]:
        """Every model a request may name, loaded or not: models load on first use
        (LM Studio lists its downloaded models here too when it loads just in time)."""
        loaded = {m.spec.id: m.created for m in self.models}
        models = [(spec.id, loaded.get(spec.id) or _created(spec))
                  for spec in self.models.available()]
        if _anthropic(request):
            return anthropic_models.model_list(models)
        return {"object": "list", "data": [_model_object(*m) for m in models]}

    async def _get_model(self, request: Request) -> dict[str, Any]:
        requested = request.path_params["model_id"] or "\0"
        if self.models.is_loaded(requested):
            model, shown = self.models.resolve(requested)
            found = shown, model.created
        else:
            found = requested, _created(self.models.spec(requested))
        if _anthropic(request):
            return anthropic_models.model_object(*found)
        return _model_object(*found)
