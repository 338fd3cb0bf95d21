"""Embeddings through the official clients as oracles, on the fake engine: the openai SDK
(`embeddings.create`, float and base64, strict validation), the `ollama` client
(`embed`, legacy `embeddings`), and LM Studio's `/api/v0/embeddings`; one text gives
one vector through every endpoint; refusals in each API's own envelope."""

from __future__ import annotations

import base64
import math
import struct

import httpx
import ollama
import openai
import pytest
from openai import AsyncOpenAI

from parlance.core.embeddings import EmbeddingInput, Normalize
from parlance.engines.fake import FakeEngine
from tests.support.fake_app import make_app

TEXT = "the cat sat on the mat"


def openai_sdk(engine: FakeEngine, *, strict: bool = True) -> AsyncOpenAI:
    """Strict validation checks float answers; base64 ones never pass it (the SDK's type
    says floats, and it decodes base64 only after validating), with OpenAI's API too."""
    transport = httpx.ASGITransport(app=make_app(engine))
    return AsyncOpenAI(base_url="http://test/v1", api_key="sk-test", max_retries=0,
                       http_client=httpx.AsyncClient(transport=transport),
                       _strict_response_validation=strict)


def ollama_sdk(engine: FakeEngine) -> ollama.AsyncClient:
    return ollama.AsyncClient(host="http://test",
                              transport=httpx.ASGITransport(app=make_app(engine)))


def http(engine: FakeEngine) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app(engine)),
                             base_url="http://test")


def close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-7)
                                    for x, y in zip(a, b, strict=True))


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


# -- OpenAI ------------------------------------------------------------------------------


async def test_openai_float_one_and_many():
    engine = FakeEngine()
    client = openai_sdk(engine)
    one = await client.embeddings.create(model="fake-model", input=TEXT,
                                         encoding_format="float")
    assert one.object == "list" and one.model == "fake-model"
    assert [d.index for d in one.data] == [0] and one.data[0].object == "embedding"
    assert len(one.data[0].embedding) == engine.embedding_size
    assert math.isclose(norm(one.data[0].embedding), 1.0, rel_tol=1e-9)
    assert one.usage.prompt_tokens == one.usage.total_tokens == 6

    many = await client.embeddings.create(model="fake-model", input=[TEXT, "a dog", TEXT],
                                          encoding_format="float")
    assert [d.index for d in many.data] == [0, 1, 2]
    assert many.data[0].embedding == many.data[2].embedding == one.data[0].embedding
    assert many.data[1].embedding != many.data[0].embedding
    assert many.usage.prompt_tokens == 14
    assert engine.embed_requests[-1].normalize is Normalize.UNIT
    assert engine.embed_requests[-1].truncate is False


async def test_openai_base64_decodes_to_the_float_vector():
    engine = FakeEngine()
    floats = await openai_sdk(engine).embeddings.create(model="fake-model",
                                                        input=[TEXT, "a dog"],
                                                        encoding_format="float")
    client = openai_sdk(engine, strict=False)
    # Without encoding_format the SDK asks for base64 and decodes it itself.
    decoded = await client.embeddings.create(model="fake-model", input=[TEXT, "a dog"])
    packed = await client.embeddings.create(model="fake-model", input=[TEXT, "a dog"],
                                            encoding_format="base64")
    for f, d, p in zip(floats.data, decoded.data, packed.data, strict=True):
        assert isinstance(p.embedding, str)
        raw = base64.b64decode(p.embedding)
        assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == d.embedding
        assert close(d.embedding, f.embedding)  # float32 on the wire, both ways


async def test_openai_token_ids_inputs():
    engine = FakeEngine()
    client = openai_sdk(engine)
    single = await client.embeddings.create(model="fake-model", input=[5, 6, 7],
                                            encoding_format="float")
    assert len(single.data) == 1 and single.usage.prompt_tokens == 3
    assert engine.embed_requests[-1].inputs == (EmbeddingInput(token_ids=(5, 6, 7)),)
    lists = await client.embeddings.create(model="fake-model", input=[[5, 6, 7], [8]],
                                           encoding_format="float")
    assert len(lists.data) == 2 and lists.usage.prompt_tokens == 4
    assert lists.data[0].embedding == single.data[0].embedding


@pytest.mark.parametrize(("body", "param"), [
    ({"input": []}, "input"),
    ({"input": ""}, "input"),
    ({"input": ["a", ""]}, "input"),
    ({"input": [[1, 2], []]}, "input[1]"),
    ({"input": [-1]}, "input"),
    ({"input": 5}, "input"),
    ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
    ({"input": "x", "dimensions": 0}, "dimensions"),
    ({"input": "x", "dimensions": 4}, "dimensions"),
    ({"input": ["x"] * 2049}, "input"),
])
async def test_openai_refusals_are_400_in_openai_envelope(body, param):
    async with http(FakeEngine()) as c:
        response = await c.post("/v1/embeddings", json={"model": "fake-model", **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] is not None and error["param"].startswith(param.split("[")[0])


async def test_openai_overflow_is_400_and_sdk_raises():
    engine = FakeEngine(context_length=4)
    with pytest.raises(openai.BadRequestError) as caught:
        await openai_sdk(engine).embeddings.create(model="fake-model", input="a b c d e",
                                                   encoding_format="float")
    assert caught.value.body["code"] == "context_length_exceeded"
    assert caught.value.body["param"] == "input"


async def test_openai_unknown_model_is_404_and_no_v1_path_works():
    async with http(FakeEngine()) as c:
        missing = await c.post("/v1/embeddings", json={"model": "nope", "input": "x"})
        bare = await c.post("/embeddings", json={"model": "fake-model", "input": "x"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    assert bare.status_code == 200 and len(bare.json()["data"]) == 1


async def test_openai_dimensions_equal_to_the_model_is_fine():
    engine = FakeEngine()
    result = await openai_sdk(engine).embeddings.create(
        model="fake-model", input=TEXT, dimensions=engine.embedding_size,
        encoding_format="float")
    assert len(result.data[0].embedding) == engine.embedding_size


# -- LM Studio ----------------------------------------------------------------------------


async def test_lmstudio_v0_embeddings_shape_and_envelope():
    engine = FakeEngine()
    async with http(engine) as c:
        ok = await c.post("/api/v0/embeddings", json={"model": "fake-model", "input": TEXT})
        bad = await c.post("/api/v0/embeddings", json={"model": "fake-model", "input": []})
        missing = await c.post("/api/v0/embeddings", json={"model": "nope", "input": "x"})
    body = ok.json()
    assert body["object"] == "list" and body["model"] == "fake-model"
    assert body["data"][0]["object"] == "embedding" and body["data"][0]["index"] == 0
    assert body["usage"] == {"prompt_tokens": 6, "total_tokens": 6}
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request"
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "model_not_found"


# -- Ollama -------------------------------------------------------------------------------


async def test_ollama_embed_one_and_many():
    engine = FakeEngine()
    client = ollama_sdk(engine)
    one = await client.embed(model="fake-model", input=TEXT)
    assert isinstance(one, ollama.EmbedResponse) and one.model == "fake-model"
    assert len(one.embeddings) == 1 and len(one.embeddings[0]) == engine.embedding_size
    assert math.isclose(norm(one.embeddings[0]), 1.0, rel_tol=1e-9)
    assert one.prompt_eval_count == 6
    assert one.total_duration and one.load_duration is None  # (loaded already)
    many = await client.embed(model="fake-model", input=[TEXT, "a dog"])
    assert len(many.embeddings) == 2 and many.embeddings[0] == one.embeddings[0]
    assert many.prompt_eval_count == 8
    request = engine.embed_requests[-1]
    assert request.truncate is True and request.normalize is Normalize.UNIT


async def test_ollama_embed_truncate():
    engine = FakeEngine(context_length=3)
    client = ollama_sdk(engine)
    cut = await client.embed(model="fake-model", input="a b c d e")  # truncate: default true
    same = await client.embed(model="fake-model", input="a b c")
    assert cut.embeddings == same.embeddings and cut.prompt_eval_count == 3
    with pytest.raises(ollama.ResponseError) as caught:
        await client.embed(model="fake-model", input="a b c d e", truncate=False)
    assert caught.value.status_code == 400
    assert caught.value.error.startswith("the input length exceeds the context length")


async def test_ollama_embed_dimensions_shortens_and_normalizes_again():
    engine = FakeEngine()
    client = ollama_sdk(engine)
    full = (await client.embed(model="fake-model", input=TEXT)).embeddings[0]
    short = (await client.embed(model="fake-model", input=TEXT, dimensions=3)).embeddings[0]
    assert len(short) == 3 and math.isclose(norm(short), 1.0, rel_tol=1e-9)
    scale = norm(full[:3])
    assert close(short, [x / scale for x in full[:3]])
    longer = (await client.embed(model="fake-model", input=TEXT, dimensions=99)).embeddings[0]
    assert longer == full


async def test_ollama_empty_input_only_loads():
    engine = FakeEngine()
    async with http(engine) as c:
        response = await c.post("/api/embed", json={"model": "fake-model", "input": ""})
        legacy = await c.post("/api/embeddings", json={"model": "fake-model"})
    assert response.json() == {"model": "fake-model", "embeddings": []}
    assert legacy.json() == {"embedding": []}
    assert engine.embed_requests == []


async def test_ollama_legacy_embeddings_are_native():
    engine = FakeEngine()
    client = ollama_sdk(engine)
    legacy = await client.embeddings(model="fake-model", prompt=TEXT)
    assert isinstance(legacy, ollama.EmbeddingsResponse)
    assert engine.embed_requests[-1].normalize is Normalize.NATIVE
    # The fake model's native vectors are raw: the same direction, another length.
    unit = (await client.embed(model="fake-model", input=TEXT)).embeddings[0]
    length = norm(list(legacy.embedding))
    assert not math.isclose(length, 1.0) and close([x / length for x in legacy.embedding], unit)


async def test_ollama_errors_in_ollama_envelope():
    async with http(FakeEngine(context_length=2)) as c:
        missing = await c.post("/api/embed", json={"model": "nope", "input": "x"})
        bad_type = await c.post("/api/embed", json={"model": "fake-model", "input": [1, 2]})
        no_model = await c.post("/api/embed", json={"input": "x"})
        bad_keep = await c.post("/api/embed", json={"model": "fake-model", "input": "x",
                                                    "keep_alive": "soon"})
        legacy_long = await c.post("/api/embeddings", json={"model": "fake-model",
                                                            "prompt": "a b c"})
    assert (missing.status_code, missing.json()) == (404, {"error": "model 'nope' not found"})
    for response in (bad_type, no_model, bad_keep, legacy_long):
        assert response.status_code == 400, response.text
        assert set(response.json()) == {"error"}


# -- every endpoint ------------------------------------------------------------------------


async def test_one_text_one_vector_through_every_endpoint():
    engine = FakeEngine()
    vectors = [
        (await openai_sdk(engine).embeddings.create(model="fake-model", input=TEXT,
                                                    encoding_format="float")).data[0].embedding,
        (await openai_sdk(engine, strict=False).embeddings.create(
            model="fake-model", input=TEXT)).data[0].embedding,  # base64, decoded
        (await ollama_sdk(engine).embed(model="fake-model", input=TEXT)).embeddings[0],
    ]
    async with http(engine) as c:
        lms = await c.post("/api/v0/embeddings", json={"model": "fake-model", "input": TEXT})
    vectors.append(lms.json()["data"][0]["embedding"])
    for vector in vectors[1:]:
        assert close(list(vector), list(vectors[0]))


async def test_metrics_count_embedded_inputs():
    engine = FakeEngine()
    async with http(engine) as c:
        await c.post("/v1/embeddings", json={"model": "fake-model", "input": ["a", "b", "c"]})
        text = (await c.get("/metrics")).text
    assert "# TYPE parlance_embedding_inputs_total counter" in text
    assert 'parlance_embedding_inputs_total{model="fake-model"} 3' in text
    assert 'parlance_embedding_requests{model="fake-model"} 0' in text
