"""Continuous batching on the real engine: concurrent sequences share decode steps
without changing what any of them says, a cancelled one frees its slot at once,
a prompt sharing a cached prefix evaluates only its new suffix, and `n` choices
fan out from one prompt evaluation."""

from __future__ import annotations

import asyncio
from itertools import pairwise

import pytest

from parlance.core.events import Finish, PromptProgress, TextDelta
from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams
from tests.support.real_engine import (
    GREEDY,
    MODEL_ID,
    PATIENCE,
    SLOTS,
    TEXT_PROMPT,
    chat_request,
    endless,
    first_deltas,
    rest,
    run,
    text_request,
    wait_idle,
    wait_until,
)

pytestmark = pytest.mark.model

PROMPTS = [
    "Write a haiku about the sea.",
    "What is the capital of France?",
    "Tell me a joke about cats.",
    "Name three primary colours.",
    "How do plants grow?",
    "Describe a rainy day in London.",
    "Why is the sky blue?",
    "Give me a recipe for pancakes.",
]


async def fresh_run(engine, request: GenerationRequest):
    await engine.clear_cache()
    return await run(engine, request)


async def test_concurrent_streams_say_exactly_what_they_say_alone(engine):
    alone = [await fresh_run(engine, chat_request(p, max_tokens=48)) for p in PROMPTS]

    await engine.clear_cache()
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, engine.metrics.slots_in_use)
            await asyncio.sleep(0.002)

    watcher = asyncio.create_task(watch())
    together = await asyncio.gather(*(run(engine, chat_request(p, max_tokens=48))
                                      for p in PROMPTS))
    watcher.cancel()

    assert peak == len(PROMPTS)  # all eight really were decoded side by side
    for solo, batched in zip(alone, together, strict=True):
        assert batched.text == solo.text
        assert batched.finish == solo.finish
        assert batched.usage.completion_tokens == solo.usage.completion_tokens


async def test_cancelling_one_of_eight_leaves_the_others_intact(engine):
    def request(i: int) -> GenerationRequest:
        return text_request(f"{TEXT_PROMPT} {PROMPTS[i]}", max_tokens=40,
                            sampling=endless(engine))

    alone = [await fresh_run(engine, request(i)) for i in range(8)]
    await engine.clear_cache()
    generations = [await engine.start(request(i)) for i in range(8)]
    heads = [await first_deltas(g, 2) for g in generations]
    assert engine.metrics.slots_in_use == 8

    generations[3].cancel()
    await wait_until(lambda: engine.metrics.slots_in_use == 7, PATIENCE, "the slot is freed")
    tails = [await rest(g) for g in generations]

    assert not any(isinstance(e, Finish) for e in tails[3])
    for i, (solo, head, tail) in enumerate(zip(alone, heads, tails, strict=True)):
        if i == 3:
            continue
        text = "".join(e.text for e in head + tail if isinstance(e, TextDelta))
        assert text == solo.text
        assert [e.reason.value for e in tail if isinstance(e, Finish)] == ["length"]
    await wait_idle(engine)


async def test_second_turn_evaluates_only_the_new_suffix(engine):
    first_turn = (Message("user", "Hi! What is the capital of France?"),)
    first = await run(engine, chat_request(first_turn[0].content, max_tokens=20))
    evaluated = engine.metrics.prompt_tokens_evaluated
    hits = engine.metrics.prefix_cache_hits

    second_turn = first_turn + (Message("assistant", first.text),
                                Message("user", "And of Italy?"))
    second = await run(engine, GenerationRequest(
        model=MODEL_ID, prompts=(ChatInput(second_turn),), sampling=GREEDY, max_tokens=8))

    assert engine.metrics.prefix_cache_hits == hits + 1
    new_tokens = engine.metrics.prompt_tokens_evaluated - evaluated
    assert new_tokens < second.prompt_tokens - first.prompt_tokens  # not even turn 1's reply
    progress = [e for e in second.events if isinstance(e, PromptProgress)]
    assert progress[-1].done == progress[-1].total == second.prompt_tokens


async def test_shared_system_prompt_is_copied_from_a_running_sequence(engine):
    system = Message("system", "You are a terse assistant who answers in one line. " * 8)

    def request(question: str, **kw) -> GenerationRequest:
        return GenerationRequest(model=MODEL_ID, sampling=kw.pop("sampling", GREEDY),
                                 prompts=(ChatInput((system, Message("user", question))),), **kw)

    running = await engine.start(request("Count slowly.", max_tokens=200,
                                         sampling=endless(engine)))
    await first_deltas(running, 1)
    cached = engine.metrics.prompt_tokens_cached
    await run(engine, request("What is 2 + 2?", max_tokens=4))
    assert engine.metrics.prompt_tokens_cached - cached > 80  # the system prompt, reused
    running.cancel()
    await rest(running)


async def test_a_slot_reuses_the_prefix_it_holds_instead_of_copying_another(engine):
    """A burst of chats after a burst: each lowest free slot still holds the shared
    system prompt, so no KV stream is copied (a copy moves a whole stream buffer)."""
    system = Message("system", "You are a terse assistant who answers in one line. " * 8)

    def request(question: str) -> GenerationRequest:
        return GenerationRequest(model=MODEL_ID, sampling=GREEDY, max_tokens=4,
                                 prompts=(ChatInput((system, Message("user", question))),))

    await asyncio.gather(*(run(engine, request(q)) for q in PROMPTS[:2]))
    slots = engine.scheduler.slots
    copies = []
    copy = slots._copy
    slots._copy = lambda source, target: (copies.append((source.id, target.id)),
                                          copy(source, target))
    try:
        hits, cached = engine.metrics.prefix_cache_hits, engine.metrics.prompt_tokens_cached
        await asyncio.gather(*(run(engine, request(q)) for q in PROMPTS[2:4]))
    finally:
        del slots._copy
    assert copies == []
    assert engine.metrics.prefix_cache_hits == hits + 2
    assert engine.metrics.prompt_tokens_cached - cached > 2 * 80


async def test_n_choices_share_one_prompt_evaluation(engine):
    evaluated = engine.metrics.prompt_tokens_evaluated
    sampling = SamplingParams(temperature=0.9, seed=7)
    result = await run(engine, chat_request("Tell me a joke.", max_tokens=16, n=3,
                                            sampling=sampling, logprobs=0))
    assert engine.metrics.prompt_tokens_evaluated - evaluated == result.prompt_tokens
    choices = [result.result.choice(i) for i in range(3)]
    assert all(c.finish_reason is not None for c in choices)
    assert len({c.text for c in choices}) > 1  # each choice draws with its own sampler
    assert result.usage.prompt_tokens == result.prompt_tokens  # counted once
    assert result.usage.completion_tokens == sum(len(c.logprobs or []) for c in choices)


async def test_n_above_the_slot_count_is_refused(engine):
    from parlance.core.errors import InvalidRequest

    with pytest.raises(InvalidRequest) as info:
        await engine.start(chat_request("Hi", n=SLOTS + 1))
    assert info.value.param == "n"


async def test_several_prompts_with_n_index_choices_prompt_major(engine):
    request = GenerationRequest(
        model=MODEL_ID, prompts=text_request("One").prompts + text_request("Two").prompts,
        sampling=GREEDY, max_tokens=4, n=2)
    result = await run(engine, request)
    texts = [result.result.choice(i).text for i in range(4)]
    assert texts[0] == texts[1] and texts[2] == texts[3]  # greedy: a prompt's choices agree
    assert texts[0] == (await fresh_run(engine, text_request("One", max_tokens=4))).text
    assert texts[2] == (await fresh_run(engine, text_request("Two", max_tokens=4))).text


async def test_a_long_prompt_is_evaluated_in_small_chunks_beside_a_running_stream(engine):
    from parlance.engines.llamacpp.scheduler import PREFILL_WHILE_DECODING

    running = await engine.start(text_request(TEXT_PROMPT, max_tokens=400,
                                              sampling=endless(engine)))
    await first_deltas(running, 1)
    order: list[object] = []  # the running stream's deltas and the long prompt's progress

    async def keep_reading() -> None:
        async for _ in running:
            order.append("token")

    reader = asyncio.create_task(keep_reading())
    long_prompt = " ".join(f"Item {i} is {PROMPTS[i % 8].lower()}" for i in range(300))
    long = await engine.start(text_request(long_prompt, max_tokens=1))
    async for event in long:
        if isinstance(event, PromptProgress):
            order.append(event.done)
    running.cancel()
    await reader

    done = [x for x in order if isinstance(x, int)]
    assert done[-1] == long.prompts[0].n_tokens > 4 * PREFILL_WHILE_DECODING
    assert all(b - a <= PREFILL_WHILE_DECODING for a, b in pairwise(done))
    between = order[order.index(done[0]):order.index(done[-1])]
    assert between.count("token") >= len(done) - 1  # the stream went on at every chunk
