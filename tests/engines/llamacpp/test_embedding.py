"""`LlamaCppEngine.embed` on the real engine (SmolLM2-135M, a causal model: mean pooling
in an embedding context of its own). Expected vectors are never hard-coded: they come
from another call (alone, as token ids, in another batch)."""

from __future__ import annotations

import asyncio
import math

import llama_cpp
import numpy as np
import pytest

from parlance.core.embeddings import EmbeddingInput, EmbeddingRequest, Embeddings, Normalize
from parlance.core.errors import ContextOverflow, InvalidRequest
from parlance.engines.llamacpp.embedding import MAX_SEQUENCES, native_unit, pooling_type
from tests.support.real_engine import PATIENCE, TEXT_PROMPT, run, text_request, wait_idle

pytestmark = pytest.mark.model

CAT = "The cat sat on the mat."
CAT_AGAIN = "A cat was sitting on the rug."
REVENUE = "Quarterly revenue rose by five percent."


def request(*texts: str, **fields) -> EmbeddingRequest:
    return EmbeddingRequest(None, tuple(EmbeddingInput(text=t) for t in texts), **fields)


async def embed(engine, *texts: str, **fields) -> Embeddings:
    return await asyncio.wait_for(engine.embed(request(*texts, **fields)), PATIENCE)


def cos(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


async def test_unit_vectors_of_the_model_size_and_real_token_counts(engine):
    result = await embed(engine, CAT, REVENUE)
    size = llama_cpp.llama_model_n_embd(engine.model.model)
    assert [len(v) for v in result.vectors] == [size, size]
    for vector in result.vectors:
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-5)
    tokens = [engine.model.tokenize(t, add_special=True, parse_special=True)
              for t in (CAT, REVENUE)]
    assert result.prompt_tokens == sum(map(len, tokens))
    assert engine.metrics.embedding_inputs >= 2
    await wait_idle(engine)


async def test_causal_model_pools_by_mean_and_is_natively_unit(engine):
    assert pooling_type(engine.model) == llama_cpp.LLAMA_POOLING_TYPE_MEAN
    assert native_unit(engine.model)
    native = await embed(engine, CAT, normalize=Normalize.NATIVE)
    unit = await embed(engine, CAT)
    assert native.vectors == unit.vectors


async def test_same_text_same_vector_alone_and_in_a_batch(engine):
    alone = (await embed(engine, CAT)).vectors[0]
    assert (await embed(engine, CAT)).vectors[0] == alone  # bit for bit, the same batch
    batched = await embed(engine, *[REVENUE] * 12, CAT, CAT_AGAIN)
    assert same_direction(batched.vectors[12], alone)


def same_direction(a, b) -> bool:
    """Vectors of one text in batches of other sizes: llama.cpp picks its matmul kernels
    by the batch's size (past ~64 tokens another one, which rounds differently), so
    values move by up to ~1e-2 on SmolLM2's Q4_1 weights (cosine ~0.9995), and llama-server
    moves them alike; a mixed-up vector would be far off (cosine ~0.7 to another text)."""
    return cos(a, b) > 0.999 and bool(np.allclose(a, b, atol=0.02))


async def test_a_paraphrase_ranks_above_an_unrelated_sentence(engine):
    cat, again, revenue = (await embed(engine, CAT, CAT_AGAIN, REVENUE)).vectors
    assert cos(cat, again) > cos(cat, revenue) + 0.05
    assert cos(again, cat) > cos(again, revenue) + 0.05


async def test_token_ids_embed_like_their_text(engine):
    tokens = engine.model.tokenize(CAT, add_special=True, parse_special=True)
    by_ids = await asyncio.wait_for(engine.embed(EmbeddingRequest(
        None, (EmbeddingInput(token_ids=tuple(tokens)),))), PATIENCE)
    by_text = await embed(engine, CAT)
    assert by_ids.vectors == by_text.vectors and by_ids.prompt_tokens == len(tokens)


async def test_truncation_and_overflow(engine):
    long_text = " ".join(f"word{i}" for i in range(2000))  # far over 512 tokens
    with pytest.raises(ContextOverflow) as caught:
        await embed(engine, long_text)
    assert caught.value.param == "input" and caught.value.code == "context_length_exceeded"
    cut = await embed(engine, long_text, truncate=True)
    limit = engine._embedder().limit
    assert cut.prompt_tokens == limit == min(512, engine.context_length)
    tokens = engine.model.tokenize(long_text, add_special=True, parse_special=True)
    head = await asyncio.wait_for(engine.embed(EmbeddingRequest(
        None, (EmbeddingInput(token_ids=tuple(tokens[:limit])),))), PATIENCE)
    assert head.vectors == cut.vectors  # the first `limit` tokens, nothing else
    await wait_idle(engine)


async def test_refusals_name_the_parameter(engine):
    size = llama_cpp.llama_model_n_embd(engine.model.model)
    assert len((await embed(engine, CAT, dimensions=size)).vectors[0]) == size
    with pytest.raises(InvalidRequest) as dims:
        await embed(engine, CAT, dimensions=64)
    assert dims.value.param == "dimensions"
    with pytest.raises(InvalidRequest) as ids:
        await engine.embed(EmbeddingRequest(None, (EmbeddingInput(token_ids=(10**7,)),),
                                            param="prompt"))
    assert ids.value.param == "prompt"
    with pytest.raises(InvalidRequest):
        await engine.embed(EmbeddingRequest(None, (EmbeddingInput(token_ids=()),)))
    await wait_idle(engine)


async def test_more_inputs_than_one_batch_and_concurrent_requests(engine):
    texts = [f"Sentence number {i} is about {'cats' if i % 2 else 'money'}." for i in
             range(MAX_SEQUENCES + 9)]
    many, other = await asyncio.gather(embed(engine, *texts), embed(engine, CAT, REVENUE))
    assert len(many.vectors) == len(texts) and len(other.vectors) == 2
    for i in (0, 1, MAX_SEQUENCES, len(texts) - 1):
        assert same_direction(many.vectors[i], (await embed(engine, texts[i])).vectors[0])
    assert same_direction(other.vectors[0], (await embed(engine, CAT)).vectors[0])
    await wait_idle(engine)


async def test_a_cancelled_request_leaves_the_engine_idle(engine):
    texts = [f"Item {i}: a fairly ordinary sentence to embed." for i in range(200)]
    task = asyncio.ensure_future(engine.embed(request(*texts)))
    while engine.metrics.embedding_inputs == 0 and not task.done():  # decoding begun
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_idle(engine)
    assert len((await embed(engine, CAT)).vectors) == 1


async def test_embeddings_do_not_disturb_generation(engine):
    """Greedy generation gives the same text whether embeddings run beside it or not:
    they have a context of their own, never the generation slots' cells."""
    alone = await run(engine, text_request(TEXT_PROMPT, max_tokens=24))
    texts = [f"Background sentence {i} to embed while generating." for i in range(150)]
    await asyncio.wait_for(engine.clear_cache(), PATIENCE)
    beside, _ = await asyncio.gather(run(engine, text_request(TEXT_PROMPT, max_tokens=24)),
                                     embed(engine, *texts))
    assert beside.text == alone.text
