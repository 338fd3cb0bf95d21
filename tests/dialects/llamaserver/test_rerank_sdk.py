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
