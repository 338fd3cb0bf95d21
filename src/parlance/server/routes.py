"""The route table: every API's routes (`dialects.apis.APIS`) and the server's own
endpoints. No logic lives here."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import BaseRoute, Route, WebSocketRoute

from parlance.dialects import apis
from parlance.dialects.api import Routes, Services
from parlance.dialects.openai.responses import OpenAIResponses
from parlance.models.downloads import DownloadManager
from parlance.models.served import ServedModels
from parlance.server.body.conversation_shapes import PATH as CONVERSATIONS
from parlance.server.calls.background import BackgroundRuns
from parlance.server.endpoints.api_docs import ApiDocs
from parlance.server.endpoints.conversations import ConversationEndpoints
from parlance.server.endpoints.embeddings import EmbeddingsEndpoint
from parlance.server.endpoints.engine_answers import AnsweringEndpoint
from parlance.server.endpoints.info import InfoEndpoints
from parlance.server.endpoints.lmstudio_models import LMStudioModels
from parlance.server.endpoints.metrics import MetricsEndpoint
from parlance.server.endpoints.model_listing import ModelList
from parlance.server.endpoints.ollama_models import OllamaModels
from parlance.server.endpoints.stored_responses import StoredResponses
from parlance.server.endpoints.token_counts import TokenCounts
from parlance.server.endpoints.web import ASSETS, WebPage
from parlance.server.generation.handler import GenerationHandler
from parlance.server.generation.socket_mode import SocketEndpoint
from parlance.server.http.refusal import Render
from parlance.server.sealing import server_sealer
from parlance.server.settings import ServerSettings
from parlance.store.conversations import ConversationStore
from parlance.store.responses import ResponseStore


def error_renderer(path: str) -> Render:
    """The error envelope of the API a path belongs to (the API claiming it most
    closely, `API.prefix_length`; the first API's, OpenAI's, for a path none claims),
    for errors no endpoint caught (no such route, an unexpected exception) and
    refusals before any endpoint runs."""
    owner, claim = apis.APIS[0], 0
    for api in apis.APIS:
        length = api.prefix_length(path)
        if length > claim:
            owner, claim = api, length
    return owner.render_error


def _example_model(models: ServedModels) -> str | None:
    """The model `/docs` examples name: the one the server started with, else the
    first it can serve."""
    spec = models.default_spec or next(iter(models.available()), None)
    return spec.id if spec is not None else None


def build_routes(models: ServedModels, settings: ServerSettings,
                 store: ResponseStore, downloads: DownloadManager | None,
                 conversation_store: ConversationStore | None = None) -> list[BaseRoute]:
    """Every API's routes (`dialects.apis.APIS`), then the endpoints that are one API's
    own: Responses' stored responses, LM Studio's and Ollama's model management, and
    the server's own."""
    services = Services(server_sealer(settings.data_dir))
    served = [(api.name, api.routes(services)) for api in apis.APIS]
    responses = next(d for _, made in served for _, d in made.generation
                     if isinstance(d, OpenAIResponses))
    runs = BackgroundRuns(responses, responses.framing, store, kind=responses.stored_kind,
                          keepalive_seconds=settings.keepalive_seconds)
    info = InfoEndpoints(models, settings, tuple(
        (listed.headers, ModelList(listed.listing, models, settings, tag, one=False),
         ModelList(listed.listing, models, settings, tag, one=True))
        for tag, made in served for listed in made.models if listed.headers))
    web = WebPage(info)
    stored = StoredResponses(models, settings, store, responses, runs)
    lmstudio = LMStudioModels(models, settings, downloads)
    ollama_models = OllamaModels(models, settings, downloads)
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
    for tag, made in served:
        routes += _api_routes(tag, made, models, settings, store, runs)
    # Last: POST to any other path under /v1/responses/ is no endpoint at all.
    routes.append(Route("/v1/responses/{sub_path}", _no_such_endpoint, methods=["POST"]))
    return routes


def _api_routes(tag: str, made: Routes, models: ServedModels, settings: ServerSettings,
                store: ResponseStore, runs: BackgroundRuns) -> list[BaseRoute]:
    """One API's routes, each kind served by its one generic endpoint; a dialect that
    speaks several paths has one endpoint for them all."""
    routes: list[BaseRoute] = []
    handlers: dict[int, GenerationHandler] = {}
    for path, dialect in made.generation:
        handler = handlers.get(id(dialect)) or handlers.setdefault(id(dialect), GenerationHandler(
            dialect, models, settings, store, runs if dialect is runs.dialect else None,
            tag=tag))
        routes.append(Route(path, handler.handle, methods=["POST"]))
        if isinstance(dialect, OpenAIResponses):  # WebSocket mode, on the same paths
            routes.append(WebSocketRoute(path, SocketEndpoint(handler, store).serve))
    embedders: dict[int, EmbeddingsEndpoint] = {}
    for path, embedder in made.embeddings:
        endpoint = embedders.get(id(embedder)) or embedders.setdefault(
            id(embedder), EmbeddingsEndpoint(embedder, models, settings, tag))
        routes.append(Route(path, endpoint.handle, methods=["POST"]))
    for path, counter in made.counting:
        routes.append(Route(path, TokenCounts(counter, models, settings, tag).count,
                            methods=["POST"]))
    answerers: dict[int, AnsweringEndpoint] = {}
    for path, answerer in made.answering:
        answering = answerers.get(id(answerer)) or answerers.setdefault(
            id(answerer), AnsweringEndpoint(answerer, models, settings, tag))
        routes.append(Route(path, answering.handle, methods=["POST"]))
    for listed in made.models:
        every = ModelList(listed.listing, models, settings, tag, one=False)
        one = ModelList(listed.listing, models, settings, tag, one=True)
        routes += [Route(listed.list_path, every.answer, methods=["GET"]),
                   Route(listed.model_path, one.answer, methods=["GET"])]
    return routes


async def _no_such_endpoint(request: Request) -> None:
    raise HTTPException(404)  # answered by the app's handler for unknown routes
