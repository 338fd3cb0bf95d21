"""Ollama's embeddings: `POST /api/embed` and the legacy `POST /api/embeddings`
(Ollama's `server/routes.go` EmbedHandler and EmbeddingsHandler, `api/types.go`).

`/api/embed`: `input` is a string or a list of strings; an empty one only loads the
model (`embeddings: []`). Vectors are L2-normalized. `truncate` (default true) cuts an
input to what the model takes; false makes an overflow a 400 "the input length exceeds
the context length". `dimensions` keeps the first N values and normalizes again, for
any model, as Ollama does. Durations are nanoseconds and, like the token count,
omitted when zero (Go's omitempty).

`/api/embeddings` (`prompt` → `embedding`): one vector in the model's own convention
(`Normalize.NATIVE`: raw for the models whose legacy output Ollama keeps raw); an empty
prompt only loads the model. It never truncates: an overflow is a 400.
"""

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
from parlance.core.errors import ContextOverflow, ParlanceError
from parlance.dialects.base import ErrorResponse, Incoming
from parlance.dialects.embedding_base import EmbedCall, EmbedCallFacts
from parlance.dialects.ollama import errors
from parlance.dialects.ollama.request import Options, keep_alive_seconds
from parlance.dialects.shared.wire import WireModel, parse_body

NS = 1_000_000_000


class EmbedBody(WireModel):
    model: Annotated[str, Field(min_length=1)]
    input: str | list[str] | None = None
    truncate: bool | None = None
    dimensions: int | None = None  # 0 or less (or not less than the length): unchanged
    keep_alive: float | int | str | None = None
    options: Options | None = None


class EmbeddingsBody(WireModel):
    model: Annotated[str, Field(min_length=1)]
    prompt: str = ""
    keep_alive: float | int | str | None = None
    options: Options | None = None


@dataclass(frozen=True, slots=True)
class OllamaEmbedCall(EmbedCall):
    dimensions: int | None = None  # shorten every vector to this many values


def _load_options(options: Options | None) -> int | None:
    return options.num_ctx if options is not None else None


def _nanoseconds(seconds: float | None) -> int:
    return round(seconds * NS) if seconds else 0


def _omit_zero(fields: dict[str, int]) -> dict[str, int]:
    return {key: value for key, value in fields.items() if value}


class _Errors:
    def render_error(self, error: ParlanceError) -> ErrorResponse:
        if isinstance(error, ContextOverflow):  # Ollama's words for it
            return errors.render_error(ContextOverflow("the input length exceeds the context "
                                                       f"length ({error.message})",
                                                       param=error.param, code=error.code))
        return errors.render_error(error)


class OllamaEmbed(_Errors):
    """Ollama's embeddings (`POST /api/embed`): a string or a list in, `embeddings` out."""

    body_model = EmbedBody

    def parse(self, incoming: Incoming) -> OllamaEmbedCall:
        req = parse_body(self.body_model, incoming.body)
        if isinstance(req.input, str):
            texts = [req.input] if req.input else []  # an empty string: a load
        else:
            texts = list(req.input or [])
        request = EmbeddingRequest(
            model=req.model,
            inputs=tuple(EmbeddingInput(text=t) for t in texts),
            truncate=req.truncate is not False,
            normalize=Normalize.UNIT,
        )
        dimensions = req.dimensions if req.dimensions and req.dimensions > 0 else None
        return OllamaEmbedCall(request, context_length=_load_options(req.options),
                               keep_alive=keep_alive_seconds(req.keep_alive),
                               dimensions=dimensions)

    def render(self, call: OllamaEmbedCall, served: EmbedCallFacts,
               result: Embeddings) -> dict[str, Any]:
        size = call.dimensions
        vectors = [shortened(v, size) if size is not None and size < len(v) else v
                   for v in result.vectors]
        out: dict[str, Any] = {"model": served.model, "embeddings": vectors}
        if not vectors:  # a load: Ollama answers no durations
            return out
        return out | _omit_zero({
            "total_duration": _nanoseconds(served.total_seconds),
            "load_duration": _nanoseconds(served.load_seconds),
            "prompt_eval_count": result.prompt_tokens,
        })


class OllamaEmbeddings(_Errors):
    """`POST /api/embeddings`, the legacy endpoint."""

    body_model = EmbeddingsBody

    def parse(self, incoming: Incoming) -> EmbedCall:
        req = parse_body(self.body_model, incoming.body)
        request = EmbeddingRequest(
            model=req.model,
            inputs=(EmbeddingInput(text=req.prompt),) if req.prompt else (),
            truncate=False,
            normalize=Normalize.NATIVE,
            param="prompt",
        )
        return EmbedCall(request, context_length=_load_options(req.options),
                         keep_alive=keep_alive_seconds(req.keep_alive))

    def render(self, call: EmbedCall, served: EmbedCallFacts,
               result: Embeddings) -> dict[str, Any]:
        return {"embedding": result.vectors[0] if result.vectors else []}
