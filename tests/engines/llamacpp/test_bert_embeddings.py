"""The embedding path of an encoder model: all-MiniLM-L6-v2 (BERT, mean pooling declared
in its GGUF), converted from the PyPI wheel by `tests/support/bert_gguf.py`. llama.cpp's
answers are checked against the same network computed in numpy, and the model is
served from `--models-dir` by `parlance serve` like any GGUF a user drops there."""

from __future__ import annotations

import asyncio
import shutil

import httpx
import llama_cpp
import numpy as np
import ollama
import pytest

from parlance.core.embeddings import EmbeddingInput, EmbeddingRequest, Normalize
from parlance.engines.llamacpp import LlamaCppEngine
from parlance.engines.llamacpp.embedding import native_unit, pooling_type
from parlance.engines.llamacpp.model import ContextSettings
from tests.support.bert_gguf import minilm_gguf, reference_embedding
from tests.support.real_engine import PATIENCE
from tests.support.serve_process import serve

pytestmark = pytest.mark.model

TEXTS = ("The cat sat on the mat.", "A cat was sitting on the rug.",
         "Quarterly revenue rose by five percent.")


@pytest.fixture(scope="module")
def bert():
    engine = LlamaCppEngine.load(minilm_gguf(), ContextSettings(n_ctx=4096, n_threads=2,
                                                                parallel=2))
    yield engine
    asyncio.run(engine.aclose())


async def embed(engine, *inputs: EmbeddingInput, **fields):
    return await asyncio.wait_for(engine.embed(EmbeddingRequest(None, inputs, **fields)),
                                  PATIENCE)


def texts(*values: str) -> tuple[EmbeddingInput, ...]:
    return tuple(EmbeddingInput(text=v) for v in values)


def cos(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_the_gguf_declares_an_encoder_with_mean_pooling(bert):
    model = bert.model
    assert model.meta("general.architecture") == "bert"
    assert pooling_type(model) == llama_cpp.LLAMA_POOLING_TYPE_MEAN
    assert native_unit(model)  # WordPiece BERT: Ollama's legacy output was unit too
    assert bert._embedder().end_tokens == {102}  # [SEP]
    assert bert._embedder().limit == 512  # its training context
    assert model.tokenize(TEXTS[0], add_special=True, parse_special=True) == [
        101, 1996, 4937, 2938, 2006, 1996, 13523, 1012, 102]  # [CLS] the cat ... [SEP]


async def test_llama_cpp_agrees_with_the_network_in_numpy(bert):
    result = await embed(bert, *texts(*TEXTS))
    for text, vector in zip(TEXTS, result.vectors, strict=True):
        tokens = bert.model.tokenize(text, add_special=True, parse_special=True)
        expected = reference_embedding(tokens)
        assert len(vector) == 384
        assert cos(vector, expected) > 0.9999
        assert np.allclose(vector, expected, atol=2e-3)
    assert result.prompt_tokens == 9 + 10 + 9


async def test_a_paraphrase_ranks_above_an_unrelated_sentence(bert):
    cat, again, revenue = (await embed(bert, *texts(*TEXTS))).vectors
    assert cos(cat, again) > 0.6 > 0.1 > cos(cat, revenue)


async def test_truncation_keeps_the_closing_sep(bert):
    long_text = " ".join(["embedding"] * 700)
    tokens = bert.model.tokenize(long_text, add_special=True, parse_special=True)
    assert len(tokens) > 512 and tokens[-1] == 102
    cut = await embed(bert, EmbeddingInput(text=long_text), truncate=True)
    assert cut.prompt_tokens == 512
    by_ids = await embed(bert, EmbeddingInput(token_ids=(*tokens[:511], 102)))
    assert by_ids.vectors == cut.vectors
    native = await embed(bert, EmbeddingInput(text=TEXTS[0]), normalize=Normalize.NATIVE)
    assert native.vectors == (await embed(bert, *texts(TEXTS[0]))).vectors


def test_served_from_a_models_dir(tmp_path):
    """`parlance serve --models-dir` lists the GGUF and embeds with it on demand (its
    default model stays SmolLM2): OpenAI's and Ollama's endpoints give one vector."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(minilm_gguf(), models / "all-MiniLM-L6-v2-F32.gguf")
    with serve(tmp_path, "--models-dir", str(models), "--threads", "2") as server:
        listed = httpx.get(f"{server.base_url}/v1/models", timeout=60).json()["data"]
        name = next(m["id"] for m in listed if "minilm" in m["id"].lower())
        openai_answer = httpx.post(f"{server.base_url}/v1/embeddings",
                                   json={"model": name, "input": list(TEXTS)},
                                   timeout=PATIENCE)
        assert openai_answer.status_code == 200, openai_answer.text
        vectors = [d["embedding"] for d in openai_answer.json()["data"]]
        with ollama.Client(host=server.base_url, timeout=PATIENCE) as client:
            alone = client.embed(model=name, input=TEXTS[0]).embeddings[0]
            legacy = client.embeddings(model=name, prompt=TEXTS[0]).embedding
    tokens = [101, 1996, 4937, 2938, 2006, 1996, 13523, 1012, 102]
    assert cos(vectors[0], reference_embedding(tokens)) > 0.9999
    assert list(legacy) == list(alone)
    assert cos(alone, vectors[0]) > 0.9999
    assert cos(vectors[0], vectors[1]) > cos(vectors[0], vectors[2])
