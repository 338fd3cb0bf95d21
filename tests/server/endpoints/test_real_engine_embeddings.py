"""Embeddings over HTTP on the REAL engine (SmolLM2-135M, mean pooling), through the
official clients: the openai SDK (float and base64), the `ollama` client (`embed`, the
legacy `embeddings`) and LM Studio's `/api/v0/embeddings`. One text gives one vector
through every endpoint, and a paraphrase ranks above an unrelated sentence."""

from __future__ import annotations

import math

import httpx
import numpy as np
import ollama
import pytest
from openai import AsyncOpenAI

from tests.support.real_engine import (
    MODEL_ID,
    REQUEST_TIMEOUT,
    asgi_client,
    local_engine_only,
    make_app,
    wait_idle,
)

pytestmark = pytest.mark.model

CAT = "The cat sat on the mat."
CAT_AGAIN = "A cat was sitting on the rug."
REVENUE = "Quarterly revenue rose by five percent."


@pytest.fixture
def app(llama):
    return make_app(llama)


def openai_sdk(app, *, strict: bool = True) -> AsyncOpenAI:
    return AsyncOpenAI(base_url="http://parlance.test/v1", api_key="sk-test", max_retries=0,
                       http_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                                     timeout=REQUEST_TIMEOUT),
                       _strict_response_validation=strict)


def ollama_sdk(app) -> ollama.AsyncClient:
    return ollama.AsyncClient(host="http://parlance.test", timeout=REQUEST_TIMEOUT,
                              transport=httpx.ASGITransport(app=app))


def cos(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@local_engine_only("vectors relayed as JSON floats are not the same to the bit")
async def test_one_text_one_vector_through_every_endpoint(app, llama):
    floats = await openai_sdk(app).embeddings.create(model=MODEL_ID, input=CAT,
                                                     encoding_format="float")
    vector = floats.data[0].embedding
    assert len(vector) == 576 and math.isclose(float(np.linalg.norm(vector)), 1.0,
                                               rel_tol=1e-5)
    tokens = llama.model.tokenize(CAT, add_special=True, parse_special=True)
    assert floats.usage.prompt_tokens == floats.usage.total_tokens == len(tokens)
    decoded = await openai_sdk(app, strict=False).embeddings.create(model=MODEL_ID,
                                                                    input=CAT)  # base64
    ollama_client = ollama_sdk(app)
    embed = await ollama_client.embed(model=MODEL_ID, input=CAT)
    legacy = await ollama_client.embeddings(model=MODEL_ID, prompt=CAT)
    async with asgi_client(app) as c:
        lms = (await c.post("/api/v0/embeddings", json={"model": MODEL_ID, "input": CAT})).json()
        bare = (await c.post("/embeddings", json={"model": MODEL_ID, "input": CAT})).json()
    assert embed.prompt_eval_count == len(tokens) and embed.total_duration
    # Each request embeds the one text alone, so the vector is the same to the bit.
    for other in (decoded.data[0].embedding, embed.embeddings[0], legacy.embedding,
                  lms["data"][0]["embedding"], bare["data"][0]["embedding"]):
        assert list(other) == vector
    await wait_idle(llama)


async def test_a_paraphrase_ranks_above_an_unrelated_sentence(app, llama):
    result = await openai_sdk(app).embeddings.create(
        model=MODEL_ID, input=[CAT, CAT_AGAIN, REVENUE], encoding_format="float")
    cat, again, revenue = (d.embedding for d in result.data)
    assert cos(cat, again) > cos(cat, revenue) + 0.05
    ollama_vectors = (await ollama_sdk(app).embed(model=MODEL_ID,
                                                  input=[CAT, CAT_AGAIN, REVENUE])).embeddings
    assert cos(ollama_vectors[0], ollama_vectors[1]) > cos(ollama_vectors[0], ollama_vectors[2])
    await wait_idle(llama)


@local_engine_only("the limits asserted are the local embedding context's")
async def test_token_ids_and_limits(app, llama):
    tokens = llama.model.tokenize(CAT, add_special=True, parse_special=True)
    client = openai_sdk(app)
    by_ids = await client.embeddings.create(model=MODEL_ID, input=[tokens, tokens[:3]],
                                            encoding_format="float")
    by_text = await client.embeddings.create(model=MODEL_ID, input=CAT, encoding_format="float")
    assert cos(by_ids.data[0].embedding, by_text.data[0].embedding) > 0.999
    assert by_ids.usage.prompt_tokens == len(tokens) + 3
    long_text = " ".join(f"word{i}" for i in range(2000))
    async with asgi_client(app) as c:
        refused = await c.post("/v1/embeddings", json={"model": MODEL_ID, "input": long_text})
        dims = await c.post("/v1/embeddings", json={"model": MODEL_ID, "input": CAT,
                                                    "dimensions": 128})
        strict = await c.post("/api/embed", json={"model": MODEL_ID, "input": long_text,
                                                  "truncate": False})
        cut = await c.post("/api/embed", json={"model": MODEL_ID, "input": long_text})
        short = await c.post("/api/embed", json={"model": MODEL_ID, "input": CAT,
                                                 "dimensions": 128})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"
    assert dims.status_code == 400 and dims.json()["error"]["param"] == "dimensions"
    assert strict.status_code == 400
    assert strict.json()["error"].startswith("the input length exceeds the context length")
    assert cut.status_code == 200 and cut.json()["prompt_eval_count"] == 512
    vector = short.json()["embeddings"][0]
    assert len(vector) == 128 and math.isclose(float(np.linalg.norm(vector)), 1.0,
                                               rel_tol=1e-6)
    await wait_idle(llama)
