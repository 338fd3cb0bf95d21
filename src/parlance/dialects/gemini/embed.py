"""Gemini's embeddings: `models/{model}:embedContent` (`{"content": Content}` →
`{"embedding": {"values": […]}}`) and `:batchEmbedContents` (`{"requests": [
{"model", "content", …}]}` → `{"embeddings": [{"values": […]}]}`, what the SDKs and
Gemini CLI call). A content's text parts are joined into one input. As on Gemini, a
long input is cut to what the model takes, and `outputDimensionality` keeps the first
values (scaled to length 1 again). `taskType` and `title` are accepted: a local model
has no task-specific heads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from parlance.core.embeddings import (
    EmbeddingInput,
    EmbeddingRequest,
    Embeddings,
    Normalize,
    shortened,
)
from parlance.core.errors import InvalidRequest, ParlanceError
from parlance.dialects.base import ErrorResponse, Incoming
from parlance.dialects.embedding_base import EmbedCall, EmbedCallFacts
from parlance.dialects.gemini import errors
from parlance.dialects.gemini.request import ContentIn, GeminiModel, model_name
from parlance.dialects.shared.wire import parse_body


class EmbedContentRequest(GeminiModel):
    content: ContentIn
    model: str | None = None  # in a batch: each request names the model
    task_type: str | None = None
    title: str | None = None
    output_dimensionality: Annotated[int, Field(ge=1)] | None = None


class BatchEmbedRequest(GeminiModel):
    requests: Annotated[list[EmbedContentRequest], Field(min_length=1)]


@dataclass(frozen=True, slots=True)
class GeminiEmbedCall(EmbedCall):
    dimensions: tuple[int | None, ...] = ()  # per input: shorten to so many values


def _text(content: ContentIn, where: str) -> str:
    for j, part in enumerate(content.parts):
        if part.inline_data is not None or part.file_data is not None:
            raise InvalidRequest(f"{where}.parts[{j}]: only text can be embedded here.",
                                 param=f"{where}.parts[{j}]")
    return "\n".join(p.text for p in content.parts if p.text is not None)


def _call(model: str, requests: list[EmbedContentRequest], batch: bool) -> GeminiEmbedCall:
    inputs = []
    for i, req in enumerate(requests):
        at = f"requests[{i}]." if batch else ""
        if req.model is not None and model_name(req.model) != model:
            raise InvalidRequest(f"{at}model: the model '{req.model}' must be the one the "
                                 f"URL names (models/{model}).", param=f"{at}model")
        inputs.append(EmbeddingInput(text=_text(req.content, f"{at}content")))
    request = EmbeddingRequest(model=model, inputs=tuple(inputs), truncate=True,
                               normalize=Normalize.UNIT,
                               param="requests" if batch else "content")
    return GeminiEmbedCall(request, dimensions=tuple(r.output_dimensionality
                                                     for r in requests))


def _values(vector: list[float], size: int | None) -> dict[str, Any]:
    return {"values": shortened(vector, size) if size is not None and size < len(vector)
            else vector}


class _Errors:
    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return errors.render_error(error)


class EmbedContent(_Errors):
    """`POST /v1beta/models/{model}:embedContent`."""

    body_model = EmbedContentRequest

    def parse(self, incoming: Incoming) -> GeminiEmbedCall:
        req = parse_body(self.body_model, incoming.body)
        return _call(model_name(incoming.path.get("model", "")), [req], batch=False)

    def render(self, call: GeminiEmbedCall, served: EmbedCallFacts,
               result: Embeddings) -> dict[str, Any]:
        return {"embedding": _values(result.vectors[0], call.dimensions[0])}


class BatchEmbedContents(_Errors):
    """`POST /v1beta/models/{model}:batchEmbedContents`."""

    body_model = BatchEmbedRequest

    def parse(self, incoming: Incoming) -> GeminiEmbedCall:
        req = parse_body(self.body_model, incoming.body)
        return _call(model_name(incoming.path.get("model", "")), req.requests,
                     batch=True)

    def render(self, call: GeminiEmbedCall, served: EmbedCallFacts,
               result: Embeddings) -> dict[str, Any]:
        return {"embeddings": [_values(v, size)
                               for v, size in zip(result.vectors, call.dimensions,
                                                  strict=True)]}
