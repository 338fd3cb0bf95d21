"""Every API the server speaks: adding one is writing its package (with its `api.py`)
and adding it here. The first one's envelope answers paths no API claims."""

from __future__ import annotations

from dataclasses import replace

from parlance.dialects import api
from parlance.dialects.anthropic.api import API as ANTHROPIC
from parlance.dialects.gemini.api import API as GEMINI
from parlance.dialects.lmstudio import render_error as lmstudio_error
from parlance.dialects.lmstudio.api import API as LMSTUDIO
from parlance.dialects.ollama.api import API as OLLAMA
from parlance.dialects.openai.api import API as OPENAI
from parlance.dialects.openai.embeddings import OpenAIEmbeddings


def _lmstudio_routes(services: api.Services) -> api.Routes:
    """LM Studio's `/api/v0/embeddings` is OpenAI's embeddings in LM Studio's envelope
    (LM Studio documents it; its v1 API has none): the one route made of two APIs."""
    return replace(LMSTUDIO.routes(services), embeddings=(
        ("/api/v0/embeddings", OpenAIEmbeddings(lmstudio_error)),))


APIS: tuple[api.API, ...] = (
    OPENAI,
    ANTHROPIC,
    OLLAMA,
    replace(LMSTUDIO, routes=_lmstudio_routes),
    GEMINI,
)
