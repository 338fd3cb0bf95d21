"""What the document says about one method of one route: its body's model, the media
types of its answer, its query parameters and the envelope its errors come in."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel

from parlance.dialects.api import Counting
from parlance.dialects.base import MEDIA_TYPES, Dialect, Framing, StreamsByRoute
from parlance.dialects.embedding_base import EmbeddingDialect
from parlance.server.http.refusal import Render

Content = Mapping[str, dict[str, Any]]  # media type -> schema of a 200's body

# The answers' bodies are built by the dialects' renderers and encoders as dicts, with
# no model to take a schema from: the document names their media types only.
JSON: Content = MappingProxyType({"application/json": {"type": "object"}})
TEXT: Content = MappingProxyType({"text/plain": {"type": "string"}})
HTML: Content = MappingProxyType({"text/html": {"type": "string"}})
EMPTY: Content = MappingProxyType({})


# Before OpenAPI 3.2's `itemSchema`, an event stream's `schema` describes one event: its
# `data` is the dialect's frame (JSON, or a sentinel such as `[DONE]`), `event` its name
# where the dialect names events. NDJSON has no such convention: the body is text.
_FRAME: dict[str, dict[str, Any]] = {
    "sse": {"type": "object", "required": ["data"],
            "properties": {"data": {"type": "string"}, "event": {"type": "string"}}},
    "ndjson": {"type": "string"},
    "json": {"type": "array", "items": {"type": "object"}},
}


def streamed(framing: Framing) -> Content:
    """The media type the stream transport sends frames of this framing as."""
    return MappingProxyType({MEDIA_TYPES[framing].split(";")[0]: _FRAME[framing]})


def either(*contents: Content) -> Content:
    """An answer that comes as any of these (one JSON object, or a stream)."""
    return MappingProxyType({media: schema for c in contents for media, schema in c.items()})


@dataclass(frozen=True, slots=True)
class Query:
    """An optional parameter of the query string (or, among `Operation.headers`, a
    request header)."""

    name: str
    schema: dict[str, Any]
    description: str = ""


@dataclass(frozen=True, slots=True)
class Operation:
    tag: str  # the API it belongs to
    summary: str
    errors: tuple[Render, ...]  # the envelopes its errors come in (any of them)
    answer: Content = field(default_factory=lambda: JSON)
    body: type[BaseModel] | None = None
    query: tuple[Query, ...] = ()
    headers: tuple[Query, ...] = ()  # request headers that change the answer
    description: str = ""  # what the summary leaves out
    public: bool = False  # answered without an API key
    succeeds: bool = True  # False: every answer is an error (a path with no endpoint)


# A route that streams whatever the body says (Gemini's `:streamGenerateContent`)
# says how in its query: SSE with `alt=sse`, else one JSON array
ALT = Query("alt", {"enum": ["sse", "json"]}, "sse: the stream as server-sent events; "
            "otherwise one JSON array of the chunks, written as they are made")


def generating(dialect: Dialect[Any], tag: str) -> Operation:
    """A generation route, as its dialect reads and answers it: streamed in the
    dialect's framing when the body asks for a stream (or, for a dialect that streams
    by route, always, as SSE or one JSON array), one JSON object otherwise."""
    if isinstance(dialect, StreamsByRoute) and dialect.streaming:
        return Operation(tag, _summary(dialect), (dialect.render_error,),
                         either(streamed("sse"), streamed("json")), dialect.body_model,
                         query=(ALT,))
    streams = "stream" in dialect.body_model.model_fields  # (compaction never streams)
    return Operation(tag, _summary(dialect), (dialect.render_error,),
                     either(JSON, streamed(dialect.framing)) if streams else JSON,
                     dialect.body_model)


def embedding(dialect: EmbeddingDialect[Any], tag: str) -> Operation:
    return Operation(tag, _summary(dialect), (dialect.render_error,), JSON,
                     dialect.body_model)


def answering(dialect: Any, tag: str) -> Operation:
    """A route the engine answers at once, one JSON object (`answer_base.Answering`)."""
    return Operation(tag, _summary(dialect), (dialect.render_error,), JSON,
                     dialect.body_model)


def counting(dialect: Counting, tag: str) -> Operation:
    return Operation(tag, _summary(dialect), (dialect.render_error,), JSON,
                     dialect.body_model)


def _summary(dialect: object) -> str:
    """The first sentence of the dialect's docstring, or of its module's."""
    doc = (inspect.getdoc(type(dialect))
           or inspect.getdoc(sys.modules[type(dialect).__module__]) or type(dialect).__name__)
    paragraph = " ".join(doc.split("\n\n")[0].split())
    return paragraph.split(". ")[0].rstrip(".")
