"""OpenAI's embeddings API (`POST /v1/embeddings`), also LM Studio's `/api/v0/embeddings`
(the same bodies, LM Studio's error envelope).

`input` is a string, a list of strings, a list of token ids or a list of such lists
(at most 2048 inputs, OpenAI's limit). Vectors are L2-normalized, as OpenAI's are;
`encoding_format: "base64"` sends each as the base64 of its little-endian float32s.
An input longer than the model takes is a 400 `invalid_request_error` with code
`context_length_exceeded`, as OpenAI's embeddings answer it (not the 403 of chat
completions; OpenAI never truncates an embedding input); `dimensions`
is a 400 unless it is the model's own length (shortening is only sound for models
trained for it, which a GGUF does not declare).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from parlance.core.embeddings import EmbeddingInput, EmbeddingRequest, Embeddings, Normalize
from parlance.core.errors import ContextOverflow, InvalidRequest, ParlanceError
from parlance.dialects.base import ErrorResponse, Incoming
from parlance.dialects.embedding_base import EmbedCall, EmbedCallFacts
from parlance.dialects.openai import errors
from parlance.dialects.shared.wire import WireModel, parse_body

MAX_INPUTS = 2048  # OpenAI's limit on the items of `input`

TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class EmbeddingsBody(WireModel):
    model: str | None = None
    input: str | list[str] | TokenIds | list[TokenIds]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(ge=1)] | None = None
    user: str | None = None


@dataclass(frozen=True, slots=True)
class OpenAIEmbedCall(EmbedCall):
    base64: bool = False  # encoding_format: "base64"


def inputs(value: str | list[Any]) -> tuple[EmbeddingInput, ...]:
    if isinstance(value, str):
        items: tuple[EmbeddingInput, ...] = (EmbeddingInput(text=value),)
    elif not value:
        raise InvalidRequest("'input' must not be an empty list.", param="input")
    elif all(isinstance(v, int) for v in value):
        items = (EmbeddingInput(token_ids=tuple(value)),)
    elif all(isinstance(v, str) for v in value):
        items = tuple(EmbeddingInput(text=v) for v in value)
    else:
        items = tuple(EmbeddingInput(token_ids=tuple(v)) for v in value)
    if len(items) > MAX_INPUTS:
        raise InvalidRequest(f"'input' has {len(items)} items; at most {MAX_INPUTS}.",
                             param="input")
    if any(item.text == "" for item in items):
        raise InvalidRequest("'input' must not hold an empty string.", param="input")
    return items


def vector_base64(vector: Sequence[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


class OpenAIEmbeddings:
    body_model = EmbeddingsBody

    def __init__(self, render_error: Callable[[ParlanceError], ErrorResponse]
                 = errors.render_error) -> None:
        self._render_error = render_error

    def parse(self, incoming: Incoming) -> OpenAIEmbedCall:
        req = parse_body(self.body_model, incoming.body)
        request = EmbeddingRequest(model=req.model, inputs=inputs(req.input), truncate=False,
                                   normalize=Normalize.UNIT, dimensions=req.dimensions)
        return OpenAIEmbedCall(request, base64=req.encoding_format == "base64")

    def render(self, call: OpenAIEmbedCall, served: EmbedCallFacts,
               result: Embeddings) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"object": "embedding", "index": i,
                      "embedding": vector_base64(vector) if call.base64 else vector}
                     for i, vector in enumerate(result.vectors)],
            "model": served.model,
            "usage": {"prompt_tokens": result.prompt_tokens,
                      "total_tokens": result.prompt_tokens},
        }

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        if isinstance(error, ContextOverflow):  # OpenAI's embeddings: a plain 400
            error = InvalidRequest(error.message, param=error.param, code=error.code)
        return self._render_error(error)
