"""Cancelling real generations: the scheduler drops a sequence within a step, queued
jobs that were cancelled never run, and the KV cache stays consistent afterwards."""

from __future__ import annotations

import asyncio

import pytest

from parlance.core.events import Finish, PromptProgress, TextDelta, Usage
from tests.support.real_engine import (
    TEXT_PROMPT,
    cancel_all,
    chat_request,
    endless,
    fill_slots,
    first_deltas,
    kv_cache_mismatches,
    rest,
    run,
    text_request,
    tokens_generated,
    wait_idle,
    wait_until,
)

pytestmark = pytest.mark.model


async def test_banning_end_tokens_runs_to_max_tokens(engine):
    result = await run(engine, chat_request("Say hi.", max_tokens=40, sampling=endless(engine)))
    assert result.finish == "length"
    assert result.usage.completion_tokens == 40


async def test_cancel_mid_generation_frees_the_slot_promptly(engine):
    generation = await engine.start(text_request(TEXT_PROMPT, max_tokens=2000,
                                                 sampling=endless(engine)))
    await first_deltas(generation, 3)
    assert engine.metrics.slots_in_use == 1

    generation.cancel()
    tail = await rest(generation)
    await wait_idle(engine)
    assert not any(isinstance(e, Finish | Usage) for e in tail)  # cancelled: no finish
    assert generation.job.done.is_set()
    assert tokens_generated(generation) < 2000  # freed mid-way, not run to the end


async def test_cancel_is_idempotent(engine):
    generation = await engine.start(text_request(TEXT_PROMPT, max_tokens=2000,
                                                 sampling=endless(engine)))
    await first_deltas(generation, 1)
    for _ in range(3):
        generation.cancel()
    await rest(generation)
    await wait_idle(engine)


async def test_queued_job_cancelled_before_it_runs_never_runs(engine):
    running = await fill_slots(engine)
    queued = await engine.start(chat_request("Tell me a story.", max_tokens=50))
    await asyncio.sleep(0.05)
    assert engine.metrics.requests_waiting == 1

    queued.cancel()
    assert await rest(queued) == []  # its stream ends at once, without a single event
    await wait_until(lambda: queued.job.done.is_set() and engine.metrics.requests_waiting == 0,
                     30, "the scheduler dropped the cancelled job")
    assert not queued.job.started
    assert not any(g.job.done.is_set() for g in running)  # the others go on

    await cancel_all(running)
    await wait_idle(engine)


async def test_queued_job_starts_when_a_slot_frees(engine):
    reference = await run(engine, text_request(TEXT_PROMPT, max_tokens=8))
    running = await fill_slots(engine)
    queued = await engine.start(text_request(TEXT_PROMPT, max_tokens=8))
    await asyncio.sleep(0.05)
    assert not queued.job.started
    running[0].cancel()
    events = await rest(queued)
    assert queued.job.started
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == reference.text
    await cancel_all(running)


async def test_generation_after_a_cancel_matches_a_fresh_one(engine):
    """Cancelling mid-way leaves the KV cache consistent for the next prefix reuse."""
    reference = await run(engine, text_request(TEXT_PROMPT, max_tokens=16))
    generation = await engine.start(text_request(TEXT_PROMPT + ", in a land far away",
                                                 max_tokens=2000, sampling=endless(engine)))
    await first_deltas(generation, 5)
    generation.cancel()
    await rest(generation)
    again = await run(engine, text_request(TEXT_PROMPT, max_tokens=16))
    assert again.text == reference.text


async def test_a_prompt_cancelled_mid_prefill_is_resumed_by_its_retry(engine):
    """What a cancelled request evaluated stays cached: sent again (a client whose own
    timeout cut the stream), it resumes there, and answers as a fresh evaluation."""
    prompt = " ".join(f"item {i}," for i in range(400))  # several prompt chunks
    await engine.clear_cache()
    reference = await run(engine, text_request(prompt, max_tokens=8))
    await engine.clear_cache()
    generation = await engine.start(text_request(prompt, max_tokens=8))
    async for event in generation:
        if isinstance(event, PromptProgress):  # one chunk evaluated, more to come
            assert event.done < event.total
            evaluated = event.done
            break
    generation.cancel()
    await rest(generation)
    again = await run(engine, text_request(prompt, max_tokens=8))
    assert evaluated <= again.usage.cached_tokens < again.usage.prompt_tokens
    assert again.text == reference.text
    assert kv_cache_mismatches(engine) == []


async def test_cancel_before_the_worker_starts_a_lone_job(engine):
    """Cancelled right after start: whether or not the worker picked it up, it ends fast."""
    generation = await engine.start(text_request(TEXT_PROMPT, max_tokens=2000,
                                                 sampling=endless(engine)))
    generation.cancel()
    events = await rest(generation)
    assert not any(isinstance(e, Finish) for e in events)
    await wait_idle(engine)
