"""The route table: which path speaks which dialect. No logic lives here."""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import BaseRoute, Route, WebSocketRoute

from parlance.dialects import anthropic, lmstudio, ollama
from parlance.dialects.anthropic import AnthropicMessages
from parlance.dialects.base import Dialect
from parlance.dialects.embedding_base import EmbeddingDialect
from parlance.dialects.lmstudio import LMStudioChat
from parlance.dialects.ollama import OllamaChat, OllamaGenerate
from parlance.dialects.ollama.embed import OllamaEmbed, OllamaEmbeddings
from parlance.dialects.openai import errors as openai_errors
from parlance.dialects.openai.chat import OpenAIChat
from parlance.dialects.openai.completions import OpenAICompletions
from parlance.dialects.openai.embeddings import OpenAIEmbeddings
from parlance.dialects.openai.responses import OpenAIResponses
from parlance.dialects.openai.responses.compact import ResponsesCompaction
from parlance.dialects.openai.responses.sealed import Sealer
from parlance.models.downloads import DownloadManager
from parlance.models.served import ServedModels
from parlance.server.body.conversation_shapes import PATH as CONVERSATIONS
from parlance.server.calls.background import BackgroundRuns
from parlance.server.endpoints.api_docs import ApiDocs
from parlance.server.endpoints.conversations import ConversationEndpoints
from parlance.server.endpoints.embeddings import EmbeddingsEndpoint
from parlance.server.endpoints.info import InfoEndpoints
from parlance.server.endpoints.lmstudio_models import LMStudioModels
from parlance.server.endpoints.message_tokens import MessageTokens
from parlance.server.endpoints.metrics import MetricsEndpoint
from parlance.server.endpoints.ollama_models import OllamaModels
from parlance.server.endpoints.stored_responses import StoredResponses
from parlance.server.endpoints.web import ASSETS, WebPage
from parlance.server.generation.handler import GenerationHandler
from parlance.server.generation.socket_mode import SocketEndpoint
from parlance.server.http.refusal import Render
from parlance.server.sealing import server_sealer
from parlance.server.settings import ServerSettings
from parlance.store.conversations import ConversationStore
from parlance.store.responses import ResponseStore


def generation(sealer: Sealer, responses: OpenAIResponses, messages: AnthropicMessages
               ) -> tuple[tuple[str, Dialect[Any]], ...]:
    """Which path speaks which dialect. Each OpenAI endpoint is also reachable without
    the /v1 prefix, as llama.cpp allows."""
    return (
        ("/v1/chat/completions", OpenAIChat()),
        ("/v1/completions", OpenAICompletions()),
        ("/v1/responses", responses),
        ("/v1/responses/compact", ResponsesCompaction(sealer)),
        ("/api/v1/chat", LMStudioChat()),
        ("/v1/messages", messages),
        ("/api/chat", OllamaChat()),
        ("/api/generate", OllamaGenerate()),
    )


def embeddings() -> tuple[tuple[str, EmbeddingDialect[Any]], ...]:
    """Which path speaks which embeddings dialect (LM Studio documents its OpenAI-shaped
    `/api/v0/embeddings`; its v1 API has none)."""
    return (
        ("/v1/embeddings", OpenAIEmbeddings()),
        ("/embeddings", OpenAIEmbeddings()),
        ("/api/v0/embeddings", OpenAIEmbeddings(lmstudio.render_error)),
        ("/api/embed", OllamaEmbed()),
        ("/api/embeddings", OllamaEmbeddings()),
    )


def error_renderer(path: str) -> Render:
    """The error envelope of the API a path belongs to (each dialect names its paths;
    every other path speaks OpenAI's), for errors no endpoint caught (no such route, an
    unexpected exception) and refusals before any endpoint runs."""
    if _under(path, lmstudio.PATHS):
        return lmstudio.render_error
    if path.startswith(ollama.PREFIX):
        return ollama.render_error
    if _under(path, anthropic.PATHS):
        return anthropic.render_error
    return openai_errors.render_error


def _example_model(models: ServedModels) -> str | None:
    """The model `/docs` examples name: the one the server started with, else the
    first it can serve."""
    spec = models.default_spec or next(iter(models.available()), None)
    return spec.id if spec is not None else None


def _under(path: str, paths: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + "/") for p in paths)


def build_routes(models: ServedModels, settings: ServerSettings,
                 store: ResponseStore, downloads: DownloadManager | None,
                 conversation_store: ConversationStore | None = None) -> list[BaseRoute]:
    info = InfoEndpoints(models, settings)
    web = WebPage(info)
    sealer = server_sealer(settings.data_dir)
    responses = OpenAIResponses(sealer)
    runs = BackgroundRuns(responses, responses.framing, store, kind=responses.stored_kind,
                          keepalive_seconds=settings.keepalive_seconds)
    stored = StoredResponses(models, settings, store, responses, runs)
    lmstudio = LMStudioModels(models, settings, downloads)
    ollama_models = OllamaModels(models, settings, downloads)
    messages = AnthropicMessages()
    message_tokens = MessageTokens(models, settings, messages)
    chats = ConversationEndpoints(settings, conversation_store or ConversationStore())
    routes: list[BaseRoute] = [
        Route("/api/v1/models", lmstudio.list, methods=["GET"]),
        Route("/api/v1/models/load", lmstudio.load, methods=["POST"]),
        Route("/api/v1/models/unload", lmstudio.unload, methods=["POST"]),
        Route("/api/v1/models/download", lmstudio.download, methods=["POST"]),
        Route("/api/v1/models/download/status/{job_id}", lmstudio.download_status,
              methods=["GET"]),
        Route("/api/tags", ollama_models.tags, methods=["GET"]),  # (and HEAD, as GET's)
        Route("/api/show", ollama_models.show, methods=["POST"]),
        Route("/api/ps", ollama_models.ps, methods=["GET"]),
        Route("/api/version", ollama_models.version, methods=["GET"]),
        Route("/api/pull", ollama_models.pull, methods=["POST"]),
        Route("/api/delete", ollama_models.delete, methods=["DELETE"]),
        Route("/api/copy", ollama_models.copy, methods=["POST"]),
        Route("/v1/responses/input_tokens", stored.input_tokens, methods=["POST"]),
        Route("/v1/responses/{response_id}", stored.retrieve, methods=["GET"]),
        Route("/v1/responses/{response_id}", stored.delete, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/input_items", stored.input_items, methods=["GET"]),
        Route("/v1/responses/{response_id}/cancel", stored.cancel, methods=["POST"]),
        Route("/v1/messages/count_tokens", message_tokens.count, methods=["POST"]),
        Route("/messages/count_tokens", message_tokens.count, methods=["POST"]),
        Route(CONVERSATIONS, chats.list, methods=["GET"]),
        Route(CONVERSATIONS, chats.create, methods=["POST"]),
        Route(CONVERSATIONS + "/{conversation_id}", chats.retrieve, methods=["GET"]),
        Route(CONVERSATIONS + "/{conversation_id}", chats.replace, methods=["PUT"]),
        Route(CONVERSATIONS + "/{conversation_id}", chats.rename, methods=["PATCH"]),
        Route(CONVERSATIONS + "/{conversation_id}", chats.delete, methods=["DELETE"]),
        Route("/health", info.health, methods=["GET"]),
        Route("/", web.root, methods=["GET", "HEAD"]),  # the chat page for browsers
        Route(ASSETS + "/{name:path}", web.asset, methods=["GET"]),
        Route("/metrics", MetricsEndpoint(models, settings).scrape, methods=["GET"]),
        Route("/v1/models", info.list_models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", info.get_model, methods=["GET"]),
    ]
    docs = ApiDocs(settings, error_renderer,  # these routes' document (see route_docs.py)
                   example_model=lambda: _example_model(models))
    routes += [Route("/openapi.json", docs.document, methods=["GET"]),
               Route("/docs", docs.viewer, methods=["GET"]),
               Route("/docs/{asset}", docs.asset, methods=["GET"])]
    for path, dialect in generation(sealer, responses, messages):
        handler = GenerationHandler(dialect, models, settings, store,
                                    runs if dialect is responses else None)
        routes.append(Route(path, handler.handle, methods=["POST"]))
        if path.startswith("/v1/"):
            routes.append(Route(path.removeprefix("/v1"), handler.handle, methods=["POST"]))
        if dialect is responses:  # WebSocket mode, on the same paths
            socket = SocketEndpoint(handler, store)
            routes.append(WebSocketRoute(path, socket.serve))
            routes.append(WebSocketRoute(path.removeprefix("/v1"), socket.serve))
    for path, embedder in embeddings():
        routes.append(Route(path, EmbeddingsEndpoint(embedder, models, settings).handle,
                            methods=["POST"]))
    # Last: POST to any other path under /v1/responses/ is no endpoint at all.
    routes.append(Route("/v1/responses/{sub_path}", _no_such_endpoint, methods=["POST"]))
    return routes


async def _no_such_endpoint(request: Request) -> None:
    raise HTTPException(404)  # answered by the app's handler for unknown routes
