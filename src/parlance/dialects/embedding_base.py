"""The contract between an embeddings dialect and the one embeddings endpoint
(`server/endpoints/embeddings.py`). Embeddings are not a generation: no stream and no encoder,
so they do not go through the generation handler; the endpoint does the I/O (body,
model, engine, timing) and the dialect only reads the body and shapes the answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from parlance.core.embeddings import EmbeddingRequest, Embeddings
from parlance.core.errors import ParlanceError
from parlance.dialects.base import ErrorResponse, Incoming


@dataclass(frozen=True, slots=True)
class EmbedCall:
    """A parsed embeddings request. No inputs: only load the model (Ollama's empty
    `input`/`prompt`), answered with no vectors."""

    request: EmbeddingRequest
    context_length: int | None = None  # the context a cold model is loaded with
    keep_alive: float | None = None  # seconds the model stays loaded after (inf: always)


@dataclass(frozen=True, slots=True)
class EmbedCallFacts:
    """What the endpoint tells the dialect of one embeddings call, measured while
    answering it."""

    model: str  # the id the client asked for (aliases are echoed as sent)
    load_seconds: float | None  # this call waited that long for a load (None: loaded)
    total_seconds: float  # from the request's arrival to the answer


E = TypeVar("E", bound=EmbedCall)


class EmbeddingDialect(Protocol[E]):
    @property
    def body_model(self) -> type[BaseModel]:
        """The pydantic model `parse` validates the body with (see `Dialect.body_model`)."""

    def parse(self, incoming: Incoming) -> E: ...

    def render(self, call: E, served: EmbedCallFacts, result: Embeddings) -> dict[str, Any]: ...

    def render_error(self, error: ParlanceError) -> ErrorResponse: ...
