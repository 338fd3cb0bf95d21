"""The official cohere SDK's v2 `rerank` against /v2/rerank (fake engine): the answer
parses as its `V2RerankResponse`."""

from __future__ import annotations

import math

import cohere
import httpx
import pytest

from parlance.engines.fake import FakeEngine
from tests.support.fake_app import make_app

pytestmark = pytest.mark.clients


async def test_cohere_reranks_best_first():
    engine = FakeEngine()
    engine.score_scripts.extend([(math.log(0.2), math.log(0.8)),
                                 (math.log(0.9), math.log(0.1)),
                                 (math.log(0.5), math.log(0.5))])
    transport = httpx.ASGITransport(app=make_app(engine))
    client = cohere.AsyncClientV2(api_key="sk-test", base_url="http://test",
                                  httpx_client=httpx.AsyncClient(transport=transport),
                                  max_retries=0)
    response = await client.rerank(model="fake-model", query="Where do pandas live?",
                                   documents=["hi", "Pandas live in China.", "Bears."],
                                   top_n=2)
    assert [r.index for r in response.results] == [1, 2]
    assert response.results[0].relevance_score == pytest.approx(0.9)


async def test_cohere_v1_reads_the_documents_back():
    """Cohere's v1 client posts to /v1/rerank (llama-server's path) and reads
    `document.text` when it asked for the documents."""
    engine = FakeEngine()
    engine.score_scripts.extend([(math.log(0.3), math.log(0.7)),
                                 (math.log(0.6), math.log(0.4))])
    transport = httpx.ASGITransport(app=make_app(engine))
    client = cohere.AsyncClient(api_key="sk-test", base_url="http://test",
                                httpx_client=httpx.AsyncClient(transport=transport),
                                max_retries=0)
    response = await client.rerank(model="fake-model", query="Where do pandas live?",
                                   documents=["hi", {"text": "Pandas live in China."}],
                                   return_documents=True)
    assert [r.index for r in response.results] == [1, 0]
    assert [r.document.text for r in response.results] == ["Pandas live in China.", "hi"]
    assert response.results[1].relevance_score == pytest.approx(0.3)


@pytest.mark.model
async def test_cohere_against_a_reranker_model():
    """A reranker GGUF (tests/support/reranker_gguf.py) through the v2 client: the
    scores are its classifier head's, best first."""
    from parlance.core.rerank import RerankRequest
    from parlance.engines.llamacpp import LlamaCppEngine
    from parlance.engines.llamacpp.model import ContextSettings
    from parlance.models.registry import ModelSpec
    from parlance.models.served import ServedModel, ServedModels
    from parlance.server import ServerSettings, create_app
    from tests.support.reranker_gguf import reranker_gguf

    engine = LlamaCppEngine.load(reranker_gguf(), ContextSettings(n_ctx=512, n_threads=2,
                                                                  parallel=1))
    try:
        documents = ["hi", "it is a bear", "pandas eat bamboo"]
        expected = (await engine.rerank(RerankRequest(None, "what is a panda",
                                                      tuple(documents)))).scores
        app = create_app(ServedModels([ServedModel(ModelSpec(id="reranker-tiny",
                                                             locate=reranker_gguf),
                                                   engine, 1700000000)]), ServerSettings())
        client = cohere.AsyncClientV2(
            api_key="sk-test", base_url="http://test", max_retries=0,
            httpx_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=app)))
        response = await client.rerank(model="reranker-tiny", query="what is a panda",
                                       documents=documents, top_n=2)
        best = sorted(range(3), key=lambda i: -expected[i])[:2]
        assert [r.index for r in response.results] == best
        assert [r.relevance_score for r in response.results] == pytest.approx(
            [expected[i] for i in best], abs=1e-5)
    finally:
        await engine.aclose()
