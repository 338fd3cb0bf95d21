"""Rerank: how relevant each document is to a query, one score per document. The
engine scores with what the model is: a reranker (its classifier head), an embedding
model (cosine of the query's and the document's vectors) or an instruct model (the
probability it answers "yes" when asked whether the document meets the query, as
Qwen3-Reranker is used). The answer names which."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# Qwen3-Reranker's default task (its model card)
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


class Method(StrEnum):
    RERANKER = "reranker"  # a reranker model's own score (rank pooling)
    EMBEDDING_COSINE = "embedding_cosine"
    INSTRUCT_YES_NO = "instruct_yes_no"


@dataclass(frozen=True, slots=True)
class RerankRequest:
    model: str | None
    query: str
    documents: tuple[str, ...]
    instruction: str | None = None  # the task an instruct model judges by


@dataclass(frozen=True, slots=True)
class Reranked:
    scores: tuple[float, ...]  # one per document, in the request's order
    method: Method
    prompt_tokens: int
