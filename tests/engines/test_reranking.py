"""Rerank on real models: an embedding model (all-MiniLM-L6-v2, converted from its
wheel) by cosine, checked against its own embeddings; SmolLM2 (an instruct model) by
its "yes", checked against the scores of the same prompts."""

from __future__ import annotations

import asyncio
import math

import pytest

from parlance.core.embeddings import EmbeddingInput, EmbeddingRequest
from parlance.core.rerank import Method, RerankRequest
from parlance.core.scoring import ScoreRequest, probabilities
from parlance.engines.llamacpp import LlamaCppEngine
from parlance.engines.llamacpp.model import ContextSettings
from parlance.engines.reranking import judging
from tests.support.bert_gguf import minilm_gguf

pytestmark = pytest.mark.model

QUERY = "Where do giant pandas live?"
DOCUMENTS = ("The giant panda is a bear endemic to the mountains of central China.",
             "Quarterly revenue rose by five percent.",
             "Pandas eat bamboo in the forests of Sichuan.")


@pytest.fixture(scope="module")
def bert():
    engine = LlamaCppEngine.load(minilm_gguf(), ContextSettings(n_ctx=512, n_threads=2,
                                                                parallel=1))
    yield engine
    asyncio.run(engine.aclose())


async def test_an_embedding_model_ranks_by_cosine(bert):
    reranked = await bert.rerank(RerankRequest(None, QUERY, DOCUMENTS))
    assert reranked.method is Method.EMBEDDING_COSINE
    vectors = (await bert.embed(EmbeddingRequest(
        None, tuple(EmbeddingInput(text=t) for t in (QUERY, *DOCUMENTS))))).vectors
    expected = [math.fsum(a * b for a, b in zip(vectors[0], v, strict=True))
                for v in vectors[1:]]
    assert reranked.scores == pytest.approx(expected, abs=1e-6)
    assert reranked.scores[1] < min(reranked.scores[0], reranked.scores[2])


async def test_an_instruct_model_ranks_by_its_yes(llama):
    request = RerankRequest(None, QUERY, DOCUMENTS)
    reranked = await llama.rerank(request)  # (the fixture starts from an empty cache)
    assert reranked.method is Method.INSTRUCT_YES_NO
    assert all(0 < s < 1 for s in reranked.scores)
    # Cold again, so that the same prompts find the same prefixes cached as they go
    await asyncio.to_thread(llama.scheduler.clear_cache().wait)
    scores = await llama.score(ScoreRequest(
        _generation(request), (("yes", "no"),) * len(DOCUMENTS)))
    assert reranked.scores == pytest.approx(
        [probabilities(p.logprobs)[0] for p in scores.prompts], abs=1e-9)


def _generation(request: RerankRequest):
    from parlance.core.request import GenerationRequest, SamplingParams
    from parlance.core.tools import ReasoningEffort, ReasoningRequest
    return GenerationRequest("", tuple(judging(request, d) for d in request.documents),
                             sampling=SamplingParams(temperature=0.0),
                             reasoning=ReasoningRequest(ReasoningEffort.NONE, best_effort=True))
