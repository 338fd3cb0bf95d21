"""What `/openapi.json` says about each plain route of `routes.py` (a generation or
embeddings route describes itself from its dialect: `DescribedByDialect`). A route
missing here is listed in the document as undocumented, and
`tests/server/openapi/test_route_docs.py` fails on it."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel
from starlette.routing import Route

from parlance.dialects import anthropic, apis, lmstudio, ollama
from parlance.dialects.anthropic.api import API as ANTHROPIC_API
from parlance.dialects.gemini.api import API as GEMINI_API
from parlance.dialects.lmstudio import models as lmstudio_models
from parlance.dialects.lmstudio.api import API as LMSTUDIO_API
from parlance.dialects.ollama import models as ollama_models
from parlance.dialects.ollama.api import API as OLLAMA_API
from parlance.dialects.openai import errors as openai_errors
from parlance.dialects.openai.api import API as OPENAI_API
from parlance.dialects.openai.responses import OpenAIResponses
from parlance.server.body.conversation_shapes import PATH as CONVERSATIONS
from parlance.server.body.conversation_shapes import DocumentShape, RenameShape
from parlance.server.openapi.operation import (
    EMPTY,
    HTML,
    JSON,
    TEXT,
    Operation,
    Query,
    either,
    streamed,
)

_OPENAI = (openai_errors.render_error,)
_LMSTUDIO = (lmstudio.render_error,)
_OLLAMA = (ollama.render_error,)
_ANTHROPIC = (anthropic.render_error,)
_GEMINI = (GEMINI_API.render_error,)  # for Google's client headers (the Python SDK asks v1)
_INTEGER = {"type": "integer"}
_FILES = MappingProxyType({"text/css": {"type": "string"},
                           "text/javascript": {"type": "string"},
                           "text/plain": {"type": "string"}})
# Tags: the APIs (as the dialects' routes are grouped), and the server's own routes
OPENAI, ANTHROPIC = OPENAI_API.name, ANTHROPIC_API.name
OLLAMA, LMSTUDIO = OLLAMA_API.name, LMSTUDIO_API.name
SERVER = "Server"

PLAIN: dict[tuple[str, str], Operation] = {
    ("GET", "/api/v1/models"): Operation(LMSTUDIO, "The models", _LMSTUDIO),
    ("POST", "/api/v1/models/load"): Operation(
        LMSTUDIO, "Load a model", _LMSTUDIO, either(JSON, streamed("sse")),
        body=lmstudio_models.LoadRequest, description=(
            "Answers once the model is loaded, as LM Studio's does. With `Accept: "
            "text/event-stream` (Parlance's own: LM Studio's load has no stream) the load "
            "streams LM Studio's chat events `model_load.start`, `model_load.progress` "
            "(`progress` 0 to 1) and `model_load.end` (`load_time_seconds`, and in "
            "`result` the answer above), or ends with an `error` event; what would refuse "
            "the load is still an HTTP error before the stream starts. The wait is bounded "
            "by the request timeout (408, `request_timeout`) and ends when the server "
            "shuts down (503, `server_shutting_down`); the load itself runs on, and its "
            "model stays loaded.")),
    ("POST", "/api/v1/models/unload"): Operation(
        LMSTUDIO, "Unload a model", _LMSTUDIO, body=lmstudio_models.UnloadRequest),
    ("POST", "/api/v1/models/download"): Operation(
        LMSTUDIO, "Download a model", _LMSTUDIO, body=lmstudio_models.DownloadRequest),
    ("GET", "/api/v1/models/download/status/{job_id}"): Operation(
        LMSTUDIO, "A download's progress", _LMSTUDIO),
    ("GET", "/api/tags"): Operation(OLLAMA, "The models", _OLLAMA),
    ("POST", "/api/show"): Operation(
        OLLAMA, "A model's details", _OLLAMA, body=ollama_models.ShowRequest),
    ("GET", "/api/ps"): Operation(OLLAMA, "The loaded models", _OLLAMA),
    ("GET", "/api/version"): Operation(OLLAMA, "The version it speaks", _OLLAMA),
    ("POST", "/api/pull"): Operation(
        OLLAMA, "Download a model", _OLLAMA, either(JSON, streamed("ndjson")),
        body=ollama_models.PullRequest),
    ("DELETE", "/api/delete"): Operation(
        OLLAMA, "Delete a model", _OLLAMA, EMPTY, body=ollama_models.DeleteRequest),
    ("POST", "/api/copy"): Operation(
        OLLAMA, "Another name for a model", _OLLAMA, EMPTY, body=ollama_models.CopyRequest),
    ("POST", "/v1/responses/input_tokens"): Operation(
        OPENAI, "Responses: count a request's input tokens", _OPENAI,
        body=OpenAIResponses.body_model),
    ("GET", "/v1/responses/{response_id}"): Operation(
        OPENAI, "Responses: a stored response, or its stream replayed", _OPENAI,
        either(JSON, streamed("sse")),
        query=(Query("stream", {"type": "boolean"}), Query("starting_after", _INTEGER))),
    ("DELETE", "/v1/responses/{response_id}"): Operation(
        OPENAI, "Responses: delete a stored response", _OPENAI),
    ("GET", "/v1/responses/{response_id}/input_items"): Operation(
        OPENAI, "Responses: the input items a stored response saw", _OPENAI,
        query=(Query("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
               Query("order", {"enum": ["asc", "desc"]}),
               Query("after", {"type": "string"}))),
    ("POST", "/v1/responses/{response_id}/cancel"): Operation(
        OPENAI, "Responses: cancel a background response", _OPENAI),
    ("POST", "/v1/responses/{sub_path}"): Operation(
        OPENAI, "Responses: no endpoint (any other path under it is not found)", _OPENAI,
        succeeds=False),
    # Anthropic's clients (they send `anthropic-version`) get Anthropic's shapes, Gemini's
    # (`x-goog-api-client`, `x-goog-api-key`) Gemini's
    ("GET", "/v1/models"): Operation(
        OPENAI, "The models (OpenAI's, Anthropic's or Gemini's list)",
        _OPENAI + _ANTHROPIC + _GEMINI),
    ("GET", "/v1/models/{model_id}"): Operation(
        OPENAI, "A model (OpenAI's, Anthropic's or Gemini's object)",
        _OPENAI + _ANTHROPIC + _GEMINI),
    ("GET", CONVERSATIONS): Operation(
        SERVER, "The web chat's conversations, the most recently updated first", _OPENAI,
        query=(Query("q", {"type": "string"}, "Text to find in a title or a message."),
               Query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}),
               Query("offset", {"type": "integer", "minimum": 0}))),
    ("POST", CONVERSATIONS): Operation(
        SERVER, "Keep a new conversation, or import exported ones", _OPENAI,
        body=DocumentShape, description=(
            "A conversation document as `GET .../{conversation_id}` exports it (its "
            "messages a tree: each names its `parent`, an earlier message), or "
            "`{\"conversations\": [document, ...]}` to import several. Other fields are "
            "kept as given; a document is at most 8 MiB of JSON.")),
    ("GET", CONVERSATIONS + "/{conversation_id}"): Operation(
        SERVER, "A conversation, whole (its export)", _OPENAI),
    ("PUT", CONVERSATIONS + "/{conversation_id}"): Operation(
        SERVER, "Replace a conversation (or keep it under this id)", _OPENAI,
        body=DocumentShape),
    ("PATCH", CONVERSATIONS + "/{conversation_id}"): Operation(
        SERVER, "Rename a conversation", _OPENAI, body=RenameShape),
    ("DELETE", CONVERSATIONS + "/{conversation_id}"): Operation(
        SERVER, "Delete a conversation", _OPENAI),
    ("GET", "/health"): Operation(SERVER, "Liveness", _OPENAI, public=True),
    ("GET", "/"): Operation(SERVER, "Liveness, as Claude Code and Ollama's apps probe it; "
                            "the web chat page for a browser (Accept: text/html)",
                            _OPENAI, either(TEXT, HTML), public=True),
    ("GET", "/web/{name}"): Operation(SERVER, "The web chat page's files", _OPENAI,
                                      either(_FILES, HTML), public=True),
    ("GET", "/metrics"): Operation(SERVER, "Prometheus metrics", _OPENAI, TEXT),
    ("GET", "/openapi.json"): Operation(SERVER, "This document", _OPENAI, public=True),
    ("GET", "/docs"): Operation(SERVER, "This document in a viewer", _OPENAI, HTML,
                                public=True),
    ("GET", "/docs/{asset}"): Operation(SERVER, "The viewer's files", _OPENAI, _FILES,
                                        public=True),
}


_MODEL = "my-model"  # (a placeholder: `examples` puts the server\'s own model there)

# A small valid body of each body model, shown by `/docs` (and sent by "Try it out");
# the schemathesis test sends each one and its streamed variant and expects a success.
# Each API's own (`API.examples`) and the model management endpoints'.
MANAGEMENT_EXAMPLES: dict[type[BaseModel], dict[str, Any]] = {
    lmstudio_models.LoadRequest: {"model": _MODEL},
    lmstudio_models.UnloadRequest: {"instance_id": _MODEL},
    lmstudio_models.DownloadRequest: {"model": "owner/repo"},
    ollama_models.ShowRequest: {"model": _MODEL},
    ollama_models.PullRequest: {"model": _MODEL, "stream": False},
    ollama_models.DeleteRequest: {"model": "my-copy"},
    ollama_models.CopyRequest: {"source": _MODEL, "destination": "my-copy"},
    DocumentShape: {"title": "Hello", "messages": [
        {"id": "m1", "parent": None, "role": "user", "text": "Hello!"}]},
    RenameShape: {"title": "Greetings"},
}


def examples(model: str | None = None) -> dict[type[BaseModel], dict[str, Any]]:
    """Every example: each registered API's, then the management endpoints'; naming
    `model` (a model this server has, so "Try it out" answers rather than 404) where
    they name the placeholder. None: the placeholder stays (a server with no model)."""
    found: dict[type[BaseModel], dict[str, Any]] = {}
    for api in apis.APIS:
        found.update(api.examples)
    every = found | MANAGEMENT_EXAMPLES
    if model is None:
        return every
    return {shape: {key: model if value == _MODEL else value for key, value in body.items()}
            for shape, body in every.items()}


@runtime_checkable
class DescribedByDialect(Protocol):
    """The owner of a route its dialect describes: `GenerationHandler`,
    `EmbeddingsEndpoint` (this floor is below both, so it asks them)."""

    def operation(self) -> Operation: ...


def describe(route: Route, method: str, path: str) -> Operation | None:
    """`method` on `route` (at `path`, its OpenAPI spelling), or None if undocumented."""
    owner: Any = getattr(route.endpoint, "__self__", None)
    if isinstance(owner, DescribedByDialect):
        return owner.operation()
    return PLAIN.get((method, path))
