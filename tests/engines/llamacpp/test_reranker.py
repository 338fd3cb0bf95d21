"""Rerank with a reranker GGUF (rank pooling, a classifier head): a tiny BERT
cross-encoder written by tests/support/reranker_gguf.py. Each score is checked against
the same network and head computed in numpy, the pair's layout token by token (the
vocabulary's markers, or the GGUF's rerank template), and /v1/rerank over HTTP."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from parlance.core.embeddings import EmbeddingInput, EmbeddingRequest
from parlance.core.errors import ContextOverflow, InvalidRequest
from parlance.core.rerank import Method, RerankRequest
from parlance.engines.llamacpp import LlamaCppEngine
from parlance.engines.llamacpp.model import ContextSettings
from parlance.engines.llamacpp.ranking import pair_tokens
from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.reranker_gguf import CLS, SEP, reference_score, reranker_gguf

pytestmark = pytest.mark.model

QUERY = "what is a panda"
DOCUMENTS = ("hi", "it is a bear", "the giant panda is a bear species endemic to china",
             "pandas eat bamboo")
TEMPLATE = "[CLS]{query}[SEP]{document}[SEP]"


def load(path) -> LlamaCppEngine:
    return LlamaCppEngine.load(path, ContextSettings(n_ctx=512, n_threads=2, parallel=1,
                                                     n_batch=64))


@pytest.fixture(scope="module")
def reranker():
    engine = load(reranker_gguf())
    yield engine
    asyncio.run(engine.aclose())


def words(engine: LlamaCppEngine, text: str) -> list[int]:
    return engine.model.tokenize(text, add_special=False, parse_special=False)


async def test_the_scores_are_the_heads(reranker):
    reranked = await reranker.rerank(RerankRequest(None, QUERY, DOCUMENTS))
    assert reranked.method is Method.RERANKER
    # a WordPiece vocabulary adds [CLS] and [SEP], no EOS: [CLS] query [SEP] document
    pairs = [[CLS, *words(reranker, QUERY), SEP, *words(reranker, d)] for d in DOCUMENTS]
    assert [pair_tokens(reranker.model, QUERY, d) for d in DOCUMENTS] == pairs
    assert reranked.prompt_tokens == sum(map(len, pairs))
    expected = [reference_score(p) for p in pairs]
    assert reranked.scores == pytest.approx(expected, abs=0.03)  # (ggml's f16 GELU)
    # the scores spread far wider than the tolerance: the order is the head's
    assert max(expected) - min(expected) > 1.0
    assert sorted(range(4), key=lambda i: reranked.scores[i]) == sorted(
        range(4), key=lambda i: expected[i])


async def test_concurrent_requests_get_their_own_scores(reranker):
    alone = await reranker.rerank(RerankRequest(None, QUERY, DOCUMENTS))
    together = await asyncio.gather(
        reranker.rerank(RerankRequest(None, QUERY, DOCUMENTS)),
        reranker.rerank(RerankRequest(None, "where do pandas live", DOCUMENTS[:2])))
    assert together[0].scores == pytest.approx(alone.scores, abs=1e-5)
    pairs = [[CLS, *words(reranker, "where do pandas live"), SEP, *words(reranker, d)]
             for d in DOCUMENTS[:2]]
    assert together[1].scores == pytest.approx([reference_score(p) for p in pairs],
                                               abs=0.03)


async def test_a_rerank_template_lays_out_the_pair():
    engine = load(reranker_gguf(TEMPLATE))
    try:
        reranked = await engine.rerank(RerankRequest(None, QUERY, DOCUMENTS[1:3]))
        pairs = [[CLS, *words(engine, QUERY), SEP, *words(engine, d), SEP]
                 for d in DOCUMENTS[1:3]]
        assert [pair_tokens(engine.model, QUERY, d) for d in DOCUMENTS[1:3]] == pairs
        assert reranked.scores == pytest.approx([reference_score(p) for p in pairs],
                                                abs=0.03)
    finally:
        await engine.aclose()


async def test_refusals(reranker):
    with pytest.raises(InvalidRequest, match="reranker") as embedding:
        await reranker.embed(EmbeddingRequest(None, (EmbeddingInput(text="hi"),)))
    assert embedding.value.status == 400
    long = " ".join(["bamboo"] * 80)  # over the 64-token micro-batch with the query
    with pytest.raises(ContextOverflow, match="document 1") as overflow:
        await reranker.rerank(RerankRequest(None, QUERY, ("hi", long)))
    assert overflow.value.param == "documents"


async def test_rerank_over_http(reranker):
    spec = ModelSpec(id="reranker-tiny", locate=reranker_gguf)
    app = create_app(ServedModels([ServedModel(spec, reranker, 1700000000)]),
                     ServerSettings())
    expected = (await reranker.rerank(RerankRequest(None, QUERY, DOCUMENTS))).scores
    best = sorted(range(4), key=lambda i: -expected[i])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        answer = await client.post("/v1/rerank", json={
            "model": "reranker-tiny", "query": QUERY, "top_n": 2, "return_documents": True,
            "documents": [DOCUMENTS[0], *({"text": d} for d in DOCUMENTS[1:])]})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["parlance_method"] == "reranker"
        assert [r["index"] for r in body["results"]] == best[:2]
        assert [r["relevance_score"] for r in body["results"]] == pytest.approx(
            [expected[i] for i in best[:2]], abs=1e-5)
        assert [r["document"]["text"] for r in body["results"]] == [DOCUMENTS[i]
                                                                    for i in best[:2]]
        plain = (await client.post("/rerank", json={"query": QUERY,
                                                    "documents": list(DOCUMENTS)})).json()
        assert [r["index"] for r in plain["results"]] == best
        assert all("document" not in r for r in plain["results"])
        refused = await client.post("/v1/embeddings", json={"model": "reranker-tiny",
                                                             "input": "hi"})
        assert refused.status_code == 400 and "reranker" in refused.json()["error"]["message"]
