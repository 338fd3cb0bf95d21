"""What one API is, for the server to serve it: the registry's entry.

Each dialect package exports one `API` from its `api.py`, and `dialects.apis.APIS`
lists them. The server's route table, the envelope of refusals made before an endpoint
runs (by path), the OpenAPI document's tags and examples, where an API key may be sent
and the tests' error-kinds and independence checks all iterate over that tuple, so
adding an API is writing its package and adding one line there.

An API's routes are of five generic kinds, each served by one generic endpoint:
generation (`base.Dialect`, the generation handler), embeddings
(`embedding_base.EmbeddingDialect`), token counting (`Counting`), the model list
(`ModelListing`) and calls the engine answers at once (`answer_base.Answering`:
decisions, token tools). Endpoints that are one API's own (Responses' stored responses,
Ollama's and LM Studio's model management) are wired by the server itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from parlance.core.errors import ParlanceError
from parlance.core.model_facts import ModelFacts
from parlance.dialects.answer_base import Answering
from parlance.dialects.base import Call, Dialect, ErrorResponse, Incoming
from parlance.dialects.embedding_base import EmbeddingDialect
from parlance.dialects.shared.sealed import Sealer

Render = Callable[[ParlanceError], ErrorResponse]


@dataclass(frozen=True, slots=True)
class Services:
    """What the server hands every API when it makes its dialects (once per server):
    the key that seals what clients carry back for it."""

    sealer: Sealer


class Counting(Protocol):
    """A token-counting route (Anthropic's `count_tokens`, Gemini's `:countTokens`):
    the call parsed as for generation, counted as it would be evaluated."""

    @property
    def body_model(self) -> type[BaseModel]: ...

    def parse(self, incoming: Incoming) -> Call: ...

    def render_count(self, tokens: int) -> dict[str, Any]: ...

    def render_error(self, error: ParlanceError) -> ErrorResponse: ...


class ModelListing(Protocol):
    """An API's model list and model objects (Gemini's `GET models`)."""

    def model_object(self, model_id: str, facts: ModelFacts) -> dict[str, Any]: ...

    def model_list(self, objects: list[dict[str, Any]]) -> dict[str, Any]: ...

    def render_error(self, error: ParlanceError) -> ErrorResponse: ...


@dataclass(frozen=True, slots=True)
class ModelRoutes:
    """`list_path` answers every model; `model_path` (with a `{model}` parameter) one.
    A request to the shared list (`GET /v1/models`, `GET /v1/models/{id}`: OpenAI's)
    that carries one of `headers` is this API's client, answered by this listing."""

    list_path: str
    model_path: str
    listing: ModelListing
    headers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Routes:
    """What one API serves, each path with the dialect that speaks it. A path is
    Starlette's: `{name}` parameters reach `parse` as `Incoming.path`."""

    generation: tuple[tuple[str, Dialect[Any]], ...] = ()
    embeddings: tuple[tuple[str, EmbeddingDialect[Any]], ...] = ()
    counting: tuple[tuple[str, Counting], ...] = ()
    models: tuple[ModelRoutes, ...] = ()
    answering: tuple[tuple[str, Answering[Any]], ...] = ()  # answered at once, no generation


@dataclass(frozen=True, slots=True)
class API:
    """`name` tags its routes in the OpenAPI document; `package` is its dialect
    package (`parlance.dialects.<package>`). Its error envelope (`render_error`)
    answers every path under its `prefixes` (a prefix covers itself and what lies
    below it; the longest prefix wins) and every path `pattern` matches. `routes`
    makes its dialects for one server; `examples` is a small valid body of each body
    model they read (shown by `/docs`, sent by the schemathesis test). An API key may
    come in `Authorization: Bearer`, or in any of `key_headers`, or on this API's
    paths in the `key_query` parameter."""

    name: str
    package: str
    prefixes: tuple[str, ...]
    render_error: Render
    routes: Callable[[Services], Routes]
    examples: Mapping[type[BaseModel], dict[str, Any]] = field(default_factory=dict)
    key_headers: tuple[str, ...] = ()
    key_query: str | None = None
    pattern: re.Pattern[str] | None = None

    def prefix_length(self, path: str) -> int:
        """How closely this API claims `path`: its longest prefix that covers it (a
        path `pattern` matches counts as whole), 0 when it does not claim it."""
        if self.pattern is not None and self.pattern.fullmatch(path):
            return len(path) + 1
        return max((len(p) for p in self.prefixes if path == p or path.startswith(p + "/")),
                   default=0)


T = TypeVar("T")


def with_unversioned(path: str, speaker: T) -> tuple[tuple[str, T], ...]:
    """A `/v1/…` path and the same path without `/v1` (as llama.cpp serves OpenAI's
    endpoints), both spoken by one dialect."""
    return (path, speaker), (path.removeprefix("/v1"), speaker)
