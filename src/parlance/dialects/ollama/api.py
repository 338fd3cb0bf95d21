"""Ollama's API as the server serves it: chat, generate and embeddings under `/api`
(the paths under it that are LM Studio's are LM Studio's: their prefixes are longer).
Its model management (`/api/tags`, `/api/show`, `/api/pull`, …) is the server's own
endpoint (`server/endpoints/ollama_models.py`)."""

from __future__ import annotations

from parlance.dialects import api
from parlance.dialects.api import Routes, Services
from parlance.dialects.ollama import OllamaChat, OllamaGenerate, errors
from parlance.dialects.ollama.embed import OllamaEmbed, OllamaEmbeddings

_MODEL = "my-model"


def routes(services: Services) -> Routes:
    return Routes(generation=(("/api/chat", OllamaChat()), ("/api/generate", OllamaGenerate())),
                  embeddings=(("/api/embed", OllamaEmbed()),
                              ("/api/embeddings", OllamaEmbeddings())))


API = api.API(
    name="Ollama", package="ollama", prefixes=("/api",), render_error=errors.render_error,
    routes=routes,
    examples={
        OllamaChat.body_model: {"model": _MODEL, "stream": False,
                                "messages": [{"role": "user", "content": "Hello!"}]},
        OllamaGenerate.body_model: {"model": _MODEL, "prompt": "Hello!", "stream": False},
        OllamaEmbed.body_model: {"model": _MODEL, "input": "Hello!"},
        OllamaEmbeddings.body_model: {"model": _MODEL, "prompt": "Hello!"},
    })
