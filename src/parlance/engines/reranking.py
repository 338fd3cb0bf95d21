"""Rerank from what every engine offers (`score`, `embed`): an embedding model's cosine,
or an instruct model's "yes" (core/rerank.py). The query comes before each document,
so the documents' prompts share it as a prefix the engine evaluates once."""

from __future__ import annotations

import math

from parlance.core.embeddings import EmbeddingInput, EmbeddingRequest, Normalize
from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams
from parlance.core.rerank import DEFAULT_INSTRUCTION, Method, Reranked, RerankRequest
from parlance.core.scoring import ScoreRequest, probabilities
from parlance.core.tools import ReasoningEffort, ReasoningRequest
from parlance.engines.base import Engine

# Qwen3-Reranker's prompt (its model card), through the model's own chat template
JUDGE = ('Judge whether the Document meets the requirements based on the Query and the '
         'Instruct provided. Note that the answer can only be "yes" or "no".')
YES, NO = "yes", "no"


def judging(request: RerankRequest, document: str) -> ChatInput:
    instruction = request.instruction or DEFAULT_INSTRUCTION
    user = f"<Instruct>: {instruction}\n<Query>: {request.query}\n<Document>: {document}"
    return ChatInput((Message("system", JUDGE), Message("user", user)))


async def by_yes_no(engine: Engine, request: RerankRequest) -> Reranked:
    """Each document's score: p("yes") / (p("yes") + p("no")) for the model's answer."""
    generation = GenerationRequest(
        model=request.model or "",
        prompts=tuple(judging(request, d) for d in request.documents),
        sampling=SamplingParams(temperature=0.0),
        reasoning=ReasoningRequest(ReasoningEffort.NONE, best_effort=True))
    scores = await engine.score(ScoreRequest(generation, ((YES, NO),) * len(request.documents),
                                             param="documents"))
    return Reranked(tuple(probabilities(p.logprobs)[0] for p in scores.prompts),
                    Method.INSTRUCT_YES_NO, scores.prompt_tokens)


async def by_cosine(engine: Engine, request: RerankRequest) -> Reranked:
    """Each document's score: the cosine of its vector and the query's."""
    texts = (request.query, *request.documents)
    embedded = await engine.embed(EmbeddingRequest(
        request.model, tuple(EmbeddingInput(text=t) for t in texts),
        normalize=Normalize.UNIT, param="documents"))
    query, *documents = embedded.vectors
    return Reranked(tuple(_dot(query, d) for d in documents), Method.EMBEDDING_COSINE,
                    embedded.prompt_tokens)


def _dot(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))
