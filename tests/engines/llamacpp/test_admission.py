"""Admission is bounded in sequences, not requests: every prompt × n of a request counts
against the wait queue, a request that could never fit is a 400 naming `prompt` or `n`,
and preparing a request (template, tokens) runs off the event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from parlance.core.errors import InvalidRequest, Overloaded
from parlance.core.request import GenerationRequest, TextInput
from tests.support.real_engine import (
    CHAT_PROMPT,
    GREEDY,
    MODEL_ID,
    TEXT_PROMPT,
    cancel_all,
    chat_request,
    fill_slots,
    run,
    text_request,
    wait_idle,
)

pytestmark = pytest.mark.model


def prompts_request(count: int, *, n: int = 1) -> GenerationRequest:
    return GenerationRequest(model=MODEL_ID, prompts=tuple(
        TextInput(text=f"{TEXT_PROMPT} {i}") for i in range(count)), sampling=GREEDY,
        max_tokens=4, n=n)


async def test_more_prompts_than_the_queue_holds_is_a_400(engine):
    limit = engine.scheduler.max_waiting
    with pytest.raises(InvalidRequest) as info:
        await engine.start(prompts_request(limit + 1))
    assert info.value.param == "prompt"
    assert f"at most {limit}" in info.value.message


async def test_prompts_times_n_over_the_queue_is_a_400(engine, monkeypatch):
    monkeypatch.setattr(engine.scheduler, "max_waiting", 4)
    with pytest.raises(InvalidRequest) as info:
        await engine.start(prompts_request(3, n=2))
    assert info.value.param == "prompt"
    with pytest.raises(InvalidRequest) as info:
        await engine.start(text_request(TEXT_PROMPT, n=5, max_tokens=4))
    assert info.value.param == "n"


async def test_waiting_sequences_count_against_the_queue(engine, monkeypatch):
    busy = await fill_slots(engine)  # everything after this waits
    monkeypatch.setattr(engine.scheduler, "max_waiting", 5)
    waiting = []
    try:
        waiting.append(await engine.start(prompts_request(2, n=2)))  # 4 sequences
        with pytest.raises(Overloaded):  # 4 + 2 > 5
            await engine.start(text_request(TEXT_PROMPT, n=2, max_tokens=4))
        waiting.append(await engine.start(text_request(TEXT_PROMPT, max_tokens=4)))  # 4 + 1
        with pytest.raises(Overloaded):
            await engine.start(text_request(TEXT_PROMPT, max_tokens=4))
        assert engine.metrics.requests_rejected >= 2
    finally:
        await cancel_all(waiting)
        await cancel_all(busy)
    await wait_idle(engine)


@pytest.mark.parametrize("step", ["start", "count_tokens"])
async def test_preparing_a_request_leaves_the_loop_free(engine, monkeypatch, step):
    """Tokenizing waits for a callback it schedules on the event loop: that callback
    runs only if the loop is free, i.e. the tokenizing runs on another thread."""
    loop = asyncio.get_running_loop()
    loop_ran = threading.Event()
    waited: list[bool] = []
    tokenize = engine.model.tokenize

    def tokenize_waiting_for_the_loop(text: str, **kw: bool) -> list[int]:
        if not waited:
            loop.call_soon_threadsafe(loop_ran.set)
            waited.append(loop_ran.wait(timeout=60))
        return tokenize(text, **kw)

    monkeypatch.setattr(engine.model, "tokenize", tokenize_waiting_for_the_loop)
    request = chat_request(CHAT_PROMPT, max_tokens=2)
    if step == "start":
        await run(engine, request)
    else:
        assert await engine.count_tokens(request) > 0
    assert waited == [True]
