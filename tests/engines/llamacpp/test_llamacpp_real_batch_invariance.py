"""One machine, one answer: a prompt's greedy (and seeded) tokens do not depend on
what the KV cache held, what the prompt was batched with, or how it was chunked.

Each prompt spans several prompt chunks (64 tokens a step here). Its answer evaluated
cold and alone is compared with the same prompt over a cached prefix (whole or
partial), restored from the prompt cache's RAM and disk tiers, decoded beside one to
three other sequences, in another engine with 512-token chunks, and as each of `n`
choices. The comparison is between runs of this engine on this machine: the one
place the tests assert exact greedy tokens, never against a literal.

The engines here are the module's own (4 slots of 1024 cells, 64-token batches, the
prompt cache's RAM tier, its disk tier where a test says), so the shared engine's cache
never meets these prompts."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from parlance.core.request import SamplingParams
from parlance.engines.llamacpp import LlamaCppEngine
from parlance.engines.llamacpp.model import ContextSettings
from parlance.engines.llamacpp.prompt_cache import CacheSettings
from parlance.models.registry import builtin_registry
from tests.support.real_engine import (
    MODEL_ID,
    Run,
    eog_tokens,
    first_deltas,
    rest,
    run,
    text_request,
)

pytestmark = pytest.mark.model

SMALL_CHUNKS = ContextSettings(n_ctx=1024, n_threads=2, parallel=4, n_batch=64,
                               batch_invariant=True)
LARGE_CHUNKS = replace(SMALL_CHUNKS, n_batch=512)
MB = 1 << 20
NEW_TOKENS = 24
# Each wait is for an event; this bound only ends a broken test. A busy machine (load
# 15 on 2 cores) takes minutes for one of these prompts beside three others.
PATIENCE = 1800.0
SENTENCES = (
    "The harbour was quiet before dawn, and the fishing boats rocked against the pier.",
    "A compiler turns source text into tokens, then into a tree, then into code.",
    "She kept her grandmother's recipes in a tin box that smelled of cinnamon.",
    "The committee postponed the vote until the auditors had finished their report.",
    "Rain had washed the chalk drawings from the pavement by the afternoon.",
    "Each request carries a model name, a list of messages and sampling settings.",
    "The old lighthouse keeper counted the ships that passed in a leather notebook.",
    "In the spring the river floods the lower fields and the farmers wait.",
    "A cache that forgets the least recently used entry keeps the hot ones close.",
    "They argued about the map for an hour and then took the longer road anyway.",
)


def passage(seed: int) -> str:
    """About 330 tokens of prose, different for each seed."""
    sentences = list(SENTENCES) * 2
    random.Random(seed).shuffle(sentences)
    return f"Story {seed}. " + " ".join(sentences)


@asynccontextmanager
async def engine_with(settings: ContextSettings = SMALL_CHUNKS, *,
                      disk: Path | None = None) -> AsyncIterator[LlamaCppEngine]:
    """An engine whose prompt cache keeps 256 MB in RAM, and on disk in `disk`."""
    path = builtin_registry()[MODEL_ID].locate()
    cache = CacheSettings(ram_bytes=256 * MB, disk_bytes=512 * MB if disk else 0,
                          directory=disk)
    engine = await asyncio.to_thread(LlamaCppEngine.load, path, settings, prompt_cache=cache)
    try:
        yield engine
    finally:
        await engine.aclose()


def tokens(engine: LlamaCppEngine, seed: int) -> list[int]:
    return engine.model.tokenize(passage(seed), add_special=True, parse_special=False)


def sampling(engine: LlamaCppEngine, *, seed: int | None = None) -> SamplingParams:
    """Greedy (or seeded) with every end token banned: each answer is NEW_TOKENS long."""
    ban = tuple((t, -100.0) for t in eog_tokens(engine))
    if seed is None:
        return SamplingParams(temperature=0.0, logit_bias=ban)
    return SamplingParams(temperature=0.9, seed=seed, logit_bias=ban)


async def answer(engine: LlamaCppEngine, prompt: list[int], *, n: int = 1,
                 seed: int | None = None) -> Run:
    return await run(engine, text_request(token_ids=prompt, max_tokens=NEW_TOKENS, n=n,
                                          sampling=sampling(engine, seed=seed)), PATIENCE)


def ids(result: Run, index: int = 0) -> tuple[int, ...]:
    found = result.result.choice(index).token_ids
    assert found is not None and len(found) == NEW_TOKENS
    return found


async def cold(engine: LlamaCppEngine, prompt: list[int], *, seed: int | None = None) -> Run:
    """The prompt alone over an empty cache (the disk tier, if any, must not hold it)."""
    await engine.clear_cache()
    result = await answer(engine, prompt, seed=seed)
    assert result.usage.cached_tokens == 0
    return result


@asynccontextmanager
async def beside(engine: LlamaCppEngine, count: int) -> AsyncIterator[None]:
    """`count` other sequences decoding meanwhile (each past its first token)."""
    others = [await engine.start(text_request(
        token_ids=tokens(engine, 100 + k), max_tokens=2000, sampling=sampling(engine)))
        for k in range(count)]
    try:
        for other in others:
            await asyncio.wait_for(first_deltas(other, 1), PATIENCE)
        yield
        assert engine.metrics.slots_in_use == count  # they were still running
    finally:
        for other in others:
            other.cancel()
        for other in others:
            await rest(other, PATIENCE)


PROMPTS = (1, 2)


async def test_a_cached_prefix_whole_or_partial_gives_the_cold_answer():
    async with engine_with() as engine:
        for seed in PROMPTS:
            prompt = tokens(engine, seed)
            assert len(prompt) > 4 * SMALL_CHUNKS.n_batch  # several prompt chunks
            reference = ids(await cold(engine, prompt))
            again = await answer(engine, prompt)  # all but its last token kept
            assert again.usage.cached_tokens == len(prompt) - 1
            assert ids(again) == reference
            await engine.clear_cache()
            kept = len(prompt) * 2 // 3 + 5  # inside a chunk, not at its border
            await answer(engine, prompt[:kept] + tokens(engine, 50 + seed)[1:40])
            partial = await answer(engine, prompt)  # the slot's tail after `kept` goes
            assert partial.usage.cached_tokens == kept
            assert ids(partial) == reference


async def test_beside_one_to_three_others_and_as_n_choices_the_answer_is_the_cold_one():
    async with engine_with() as engine:
        for seed in PROMPTS:
            prompt = tokens(engine, seed)
            reference = ids(await cold(engine, prompt))
            for count in (1, 2, 3):
                await engine.clear_cache()
                async with beside(engine, count):
                    batched = await answer(engine, prompt)
                assert batched.usage.cached_tokens == 0
                assert ids(batched) == reference, f"beside {count} others"
            await engine.clear_cache()
            choices = await answer(engine, prompt, n=3)
            assert [ids(choices, i) for i in range(3)] == [reference] * 3


async def test_prefixes_restored_from_ram_and_disk_and_other_chunks_give_the_cold_answer(
        tmp_path: Path):
    references = {}
    async with engine_with(disk=tmp_path) as engine:
        for seed in PROMPTS:
            prompt = tokens(engine, seed)
            references[seed] = reference = ids(await cold(engine, prompt))
            hits = engine.metrics.prompt_cache_ram_hits
            await answer(engine, tokens(engine, 60 + seed))  # takes the slot: saved in RAM
            restored = await answer(engine, prompt)
            assert engine.metrics.prompt_cache_ram_hits == hits + 1
            assert restored.usage.cached_tokens == len(prompt) - 1
            assert ids(restored) == reference
    # Each prompt went to disk when another took its slot: restored in an engine that
    # evaluates prompts 512 tokens a step.
    async with engine_with(LARGE_CHUNKS, disk=tmp_path) as engine:
        for seed in PROMPTS:
            restored = await answer(engine, tokens(engine, seed))
            assert restored.usage.cached_tokens > 4 * SMALL_CHUNKS.n_batch
            assert ids(restored) == references[seed]
        assert engine.metrics.prompt_cache_disk_hits == len(PROMPTS)
    async with engine_with(LARGE_CHUNKS) as engine:  # and evaluated cold there
        for seed in PROMPTS:
            assert ids(await cold(engine, tokens(engine, seed))) == references[seed]


async def test_a_seeded_sample_is_the_same_cold_cached_and_batched():
    async with engine_with() as engine:
        prompt = tokens(engine, PROMPTS[0])
        reference = ids(await cold(engine, prompt, seed=7))
        assert ids(await answer(engine, prompt, seed=7)) == reference  # cached prefix
        await engine.clear_cache()
        async with beside(engine, 2):
            assert ids(await answer(engine, prompt, seed=7)) == reference
        await engine.clear_cache()
        choices = await answer(engine, prompt, n=2, seed=7)  # choice 0 draws with seed 7
        assert ids(choices, 0) == reference
