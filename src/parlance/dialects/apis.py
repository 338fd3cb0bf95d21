"""Every API the server speaks: adding one is writing its package (with its `api.py`)
and adding it here. The first one's envelope answers paths no API claims."""

from __future__ import annotations

from dataclasses import replace

from parlance.dialects import api
from parlance.dialects.anthropic.api import API as ANTHROPIC
from parlance.dialects.gemini.api import API as GEMINI
from parlance.dialects.llamaserver.api import API as LLAMA_SERVER
from parlance.dialects.llamaserver.tokens import ApplyTemplate
from parlance.dialects.lmstudio import render_error as lmstudio_error
from parlance.dialects.lmstudio.api import API as LMSTUDIO
from parlance.dialects.mistral.api import API as MISTRAL
from parlance.dialects.ollama.api import API as OLLAMA
from parlance.dialects.openai.api import API as OPENAI
from parlance.dialects.openai.chat import OpenAIChat
from parlance.dialects.openai.embeddings import OpenAIEmbeddings
from parlance.dialects.systemone.api import API as SYSTEM_ONE


def _lmstudio_routes(services: api.Services) -> api.Routes:
    """LM Studio's `/api/v0/embeddings` is OpenAI's embeddings in LM Studio's envelope
    (LM Studio documents it; its v1 API has none): the one route made of two APIs."""
    return replace(LMSTUDIO.routes(services), embeddings=(
        ("/api/v0/embeddings", OpenAIEmbeddings(lmstudio_error)),))


def _llama_server_routes(services: api.Services) -> api.Routes:
    """llama-server's `/apply-template` reads an OpenAI chat completions body."""
    made = LLAMA_SERVER.routes(services)
    return replace(made, answering=(
        *made.answering, ("/apply-template", ApplyTemplate(OpenAIChat()))))


APIS: tuple[api.API, ...] = (
    OPENAI,
    ANTHROPIC,
    OLLAMA,
    replace(LMSTUDIO, routes=_lmstudio_routes),
    GEMINI,
    SYSTEM_ONE,
    MISTRAL,
    replace(LLAMA_SERVER, routes=_llama_server_routes),
)
