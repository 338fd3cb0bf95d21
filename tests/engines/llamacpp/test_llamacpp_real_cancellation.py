"""Cancelling real generations: the worker stops within a token or two, queued jobs
that were cancelled never run, and the KV cache stays consistent afterwards."""

from __future__ import annotations

import asyncio
import time

import pytest

from parlance.core.events import Finish, TextDelta, Usage
from parlance.core.request import SamplingParams
from tests.real_engine import (
    TEXT_PROMPT,
    chat_request,
    eog_tokens,
    run,
    text_request,
    wait_idle,
)

pytestmark = pytest.mark.slow


def endless(engine) -> SamplingParams:
    """Greedy, with every end-of-generation token banned: runs to max_tokens."""
    return SamplingParams(temperature=0.0,
                          logit_bias=tuple((t, -100.0) for t in eog_tokens(engine)))


async def first_deltas(generation, count: int) -> list:
    events = []
    async for event in generation:
        events.append(event)
        if sum(isinstance(e, TextDelta) for e in events) >= count:
            return events
    raise AssertionError(f"the generation ended after {events!r}")


async def rest(generation, timeout: float = 5.0) -> list:
    async def drain():
        return [event async for event in generation]

    return await asyncio.wait_for(drain(), timeout)


async def test_banning_end_tokens_runs_to_max_tokens(engine):
    result = await run(engine, chat_request("Say hi.", max_tokens=40, sampling=endless(engine)))
    assert result.finish == "length"
    assert result.usage.completion_tokens == 40


async def test_cancel_mid_generation_stops_the_worker_promptly(engine):
    generation = await engine.start(text_request(TEXT_PROMPT, max_tokens=2000,
                                                 sampling=endless(engine)))
    await first_deltas(generation, 3)
    assert engine._worker.busy

    cancelled_at = time.perf_counter()
    generation.cancel()
    tail = await rest(generation)
    assert await wait_idle(engine, timeout=1.0) < 1.0
    assert time.perf_counter() - cancelled_at < 1.0
    assert not any(isinstance(e, Finish | Usage) for e in tail)  # cancelled: no finish
    assert generation.job.done.is_set()


async def test_cancel_is_idempotent(engine):
    generation = await engine.start(text_request(TEXT_PROMPT, max_tokens=2000,
                                                 sampling=endless(engine)))
    await first_deltas(generation, 1)
    for _ in range(3):
        generation.cancel()
    await rest(generation)
    await wait_idle(engine, timeout=1.0)


async def test_queued_job_cancelled_before_it_runs_never_runs(engine):
    running = await engine.start(text_request(TEXT_PROMPT, max_tokens=2000,
                                              sampling=endless(engine)))
    await first_deltas(running, 2)
    queued = await engine.start(chat_request("Tell me a story.", max_tokens=50))

    queued.cancel()
    await asyncio.sleep(0.05)
    assert engine._worker.busy and not running.job.done.is_set()  # still on the first job
    assert not queued.job.ran

    running.cancel()
    await rest(running)
    assert await rest(queued) == []  # dropped without a single event
    assert queued.job.done.is_set()
    assert not queued.job.ran
    assert running.job.ran
    await wait_idle(engine, timeout=1.0)


async def test_uncancelled_queued_job_runs_after_the_first(engine):
    reference = await run(engine, text_request(TEXT_PROMPT, max_tokens=8))
    running = await engine.start(text_request(TEXT_PROMPT, max_tokens=2000,
                                              sampling=endless(engine)))
    await first_deltas(running, 2)
    queued = await engine.start(text_request(TEXT_PROMPT, max_tokens=8))
    running.cancel()
    events = await rest(queued, timeout=30)
    assert queued.job.ran
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == reference.text
    await rest(running)


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


async def test_cancel_before_the_worker_starts_a_lone_job(engine):
    """Cancelled right after start: whether or not the worker picked it up, it ends fast."""
    generation = await engine.start(text_request(TEXT_PROMPT, max_tokens=2000,
                                                 sampling=endless(engine)))
    generation.cancel()
    events = await rest(generation, timeout=2.0)
    assert not any(isinstance(e, Finish) for e in events)
    await wait_idle(engine, timeout=1.0)
