"""Rerank in the Jina / Cohere shape, as llama-server (`/rerank`, `/v1/rerank`,
`/reranking`, `/v1/reranking`), vLLM and Cohere's v2 (`/v2/rerank`) serve it.

`query` (a string) and `documents` (strings, or `{"text": …}` objects as Cohere's and
Jina's clients send), `top_n` (default and 0: every document; more is clamped),
`return_documents` (false: no `document` in the results), `instruction` (the task an
instruct model judges by, as vLLM's newer builds take it), `model`. Results best
first: `{index, relevance_score, document?: {text}}`, with `usage` and the scoring
method used (`parlance_method`: `reranker`, `embedding_cosine` or `instruct_yes_no`;
see core/rerank.py). Errors in llama-server's envelope.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from parlance.core.errors import InvalidRequest, ParlanceError
from parlance.core.rerank import Reranked, RerankRequest
from parlance.dialects.answer_base import Asked
from parlance.dialects.base import ErrorResponse, Incoming
from parlance.dialects.shared.llama_server import render_error
from parlance.dialects.shared.wire import WireModel, parse_body

MAX_DOCUMENTS = 1000
_ids = itertools.count(1)


class TextDocument(WireModel):
    text: str


class RerankBody(WireModel):
    model: str | None = None
    query: str
    documents: Annotated[list[str | TextDocument], Field(min_length=1)]
    top_n: Annotated[int, Field(ge=0)] | None = None
    return_documents: bool = False
    instruction: str | None = None


@dataclass(frozen=True, slots=True)
class RerankCall:
    request: RerankRequest
    top_n: int
    return_documents: bool


class Rerank:
    body_model = RerankBody

    def parse(self, incoming: Incoming) -> RerankCall:
        req = parse_body(self.body_model, incoming.body)
        documents = tuple(d if isinstance(d, str) else d.text for d in req.documents)
        if len(documents) > MAX_DOCUMENTS:
            raise InvalidRequest(f'"documents" holds {len(documents)}; at most '
                                 f"{MAX_DOCUMENTS}.", param="documents")
        if not req.query.strip():
            raise InvalidRequest('"query" must not be empty.', param="query")
        if any(not d.strip() for d in documents):
            raise InvalidRequest('"documents" must not hold an empty text.',
                                 param="documents")
        top_n = min(req.top_n or len(documents), len(documents))
        return RerankCall(RerankRequest(req.model, req.query, documents, req.instruction),
                          top_n, req.return_documents)

    def asked(self, call: RerankCall) -> Asked:
        return Asked(call.request.model, call.request)

    def render(self, call: RerankCall, reranked: Reranked) -> dict[str, Any]:
        order = sorted(range(len(reranked.scores)), key=lambda i: -reranked.scores[i])
        results = []
        for i in order[:call.top_n]:
            result: dict[str, Any] = {"index": i, "relevance_score": reranked.scores[i]}
            if call.return_documents:
                result["document"] = {"text": call.request.documents[i]}
            results.append(result)
        return {"id": f"rerank-{next(_ids)}", "model": call.request.model or "",
                "object": "list", "results": results,
                "usage": {"prompt_tokens": reranked.prompt_tokens,
                          "total_tokens": reranked.prompt_tokens},
                "parlance_method": reranked.method.value}

    def render_error(self, error: ParlanceError) -> ErrorResponse:
        return render_error(error)
