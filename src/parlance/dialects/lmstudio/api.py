"""LM Studio's APIs as the server serves them: its v1 chat under `/api/v1` (`/api/v0`
is its older REST API). Its v0 embeddings are OpenAI's in LM Studio's envelope, made
where every API is seen (`dialects/apis.py`); its model management is the server's own
endpoint (`server/endpoints/lmstudio_models.py`)."""

from __future__ import annotations

from parlance.dialects import api
from parlance.dialects.api import Routes, Services
from parlance.dialects.lmstudio import PATHS, LMStudioChat, errors


def routes(services: Services) -> Routes:
    return Routes(generation=(("/api/v1/chat", LMStudioChat()),))


API = api.API(
    name="LM Studio", package="lmstudio", prefixes=PATHS, render_error=errors.render_error,
    routes=routes,
    examples={LMStudioChat.body_model: {"model": "my-model", "input": "Hello!"}})
