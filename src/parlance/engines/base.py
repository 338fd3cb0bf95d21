"""The narrow engine seam every backend implements (llama.cpp, upstream, fake).

`start()` does everything that can fail *before* a response begins (render the
prompt, tokenize, check the context, build the sampler) and raises typed
errors; only then does the handler commit to a 200 and a stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from parlance.core.embeddings import EmbeddingRequest, Embeddings
from parlance.core.events import Event
from parlance.core.prompts import PromptInfo
from parlance.core.request import GenerationRequest
from parlance.core.rerank import Reranked, RerankRequest
from parlance.core.scoring import ScoreRequest, Scores
from parlance.core.tokens import DetokenizeRequest, Token, TokenizeRequest
from parlance.engines.metrics import EngineMetrics


class Generation(Protocol):
    """A started generation: an async stream of events that can be cancelled."""

    prompts: tuple[PromptInfo, ...]

    def __aiter__(self) -> AsyncIterator[Event]: ...

    def cancel(self) -> None:
        """Stop as soon as possible and free what the generation holds; the event
        stream then ends promptly (the handler's deadline relies on it). Idempotent."""


class Engine(Protocol):
    context_length: int  # tokens one sequence may use
    slots: int  # sequences decoded together

    @property
    def metrics(self) -> EngineMetrics:
        """Scraped at GET /metrics."""

    async def start(self, request: GenerationRequest) -> Generation: ...

    async def count_tokens(self, request: GenerationRequest) -> int:
        """Prompt tokens of the request's first prompt, as `start` would evaluate them."""

    async def score(self, request: ScoreRequest) -> Scores:
        """Each prompt's continuations scored by teacher forcing, without generating
        (core/scoring.py). An engine that cannot see a prompt's log-probabilities
        refuses with `NotImplementedHere` (501)."""

    async def rerank(self, request: RerankRequest) -> Reranked:
        """One relevance score per document, by what the model is (core/rerank.py)."""

    async def tokenize(self, request: TokenizeRequest) -> tuple[Token, ...]:
        """The model's tokens for the request's texts, ids passed through (refused:
        an id outside the vocabulary)."""

    async def detokenize(self, request: DetokenizeRequest) -> str:
        """The text of the tokens (special tokens spelled out; invalid UTF-8 replaced)."""

    async def render_prompt(self, request: GenerationRequest) -> str:
        """The first prompt's text as the engine would evaluate it (a chat through the
        model's template, with tools and the reasoning switch), not tokenized."""

    async def embed(self, request: EmbeddingRequest) -> Embeddings:
        """One pooled vector per input, normalized as asked. Refuses (typed errors)
        before any work: an input over the model's limit without `truncate`, bad token
        ids, `dimensions` the model's vectors do not have, a model that cannot embed."""

    async def aclose(self) -> None:
        """Unload: every generation still running ends with `Failed(ModelUnloaded)`."""
