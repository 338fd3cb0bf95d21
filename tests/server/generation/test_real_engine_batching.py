"""Batching seen from HTTP clients: `n` choices through the official openai SDK,
429 with Retry-After when the wait queue is full, prefix reuse visible at
/metrics, and no KV leak after hundreds of requests that leave at random."""

from __future__ import annotations

import asyncio
import random
import re

import httpx
import openai
import pytest

from tests.support.live_server import ServerThread
from tests.support.real_engine import (
    MODEL_ID,
    SLOTS,
    asgi_client,
    cancel_all,
    chat_request,
    fill_slots,
    kv_cache_mismatches,
    local_engine_only,
    make_app,
    no_eog_bias,
    wait_idle,
)

pytestmark = pytest.mark.model

CHAT = "/v1/chat/completions"


def metric(text: str, name: str) -> float:
    match = re.search(rf"^parlance_{name}{{[^}}]*}} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


@pytest.fixture
def server(llama):
    with ServerThread(make_app(llama)) as running:
        yield running


def sdk(server: ServerThread) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="unused",
                              _strict_response_validation=True, max_retries=0)


async def test_n_three_chat_choices_through_the_openai_sdk(server, llama):
    async with sdk(server) as client:
        reply = await client.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "Tell me a joke."}],
            n=3, temperature=0.9, seed=11, max_tokens=12, logit_bias=no_eog_bias(llama))
        assert [c.index for c in reply.choices] == [0, 1, 2]
        assert all(c.finish_reason in ("stop", "length") and c.message.content
                   for c in reply.choices)

        stream = await client.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "Tell me a joke."}],
            n=3, temperature=0.9, seed=11, max_tokens=12, logit_bias=no_eog_bias(llama),
            stream=True,
            stream_options={"include_usage": True})
        roles, texts, finishes, usages = {}, {0: "", 1: "", 2: ""}, {}, []
        async for chunk in stream:
            if chunk.usage is not None:
                usages.append(chunk.usage)
            for choice in chunk.choices:
                if choice.delta.role:
                    roles[choice.index] = choice.delta.role
                texts[choice.index] += choice.delta.content or ""
                if choice.finish_reason:
                    finishes[choice.index] = choice.finish_reason
        assert roles == {0: "assistant", 1: "assistant", 2: "assistant"}
        assert set(finishes) == {0, 1, 2}
        assert texts == {c.index: c.message.content for c in reply.choices}  # same seed
        assert len(usages) == 1 and usages[0].prompt_tokens == reply.usage.prompt_tokens


async def test_n_choices_for_each_of_two_prompts_through_completions(server):
    async with sdk(server) as client:
        reply = await client.completions.create(
            model=MODEL_ID, prompt=["Once upon a time", "The sea is"], n=2, max_tokens=5,
            temperature=0)
        assert [c.index for c in reply.choices] == [0, 1, 2, 3]
        assert reply.choices[0].text == reply.choices[1].text  # greedy
        assert reply.choices[2].text == reply.choices[3].text


@local_engine_only("an upstream model fans `n` out, one request per choice")
async def test_more_choices_than_slots_is_a_400(server):
    async with sdk(server) as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], n=SLOTS + 1)
        assert info.value.body["param"] == "n"


@local_engine_only("fills the local scheduler's queue")
async def test_full_wait_queue_is_a_429_with_retry_after(llama, monkeypatch):
    busy = await fill_slots(llama)
    monkeypatch.setattr(llama.scheduler, "max_waiting", 1)
    waiting = await llama.start(chat_request("Tell me a story.", max_tokens=4))
    try:
        async with asgi_client(make_app(llama)) as http:
            for stream in (False, True):
                response = await http.post(CHAT, json={
                    "model": MODEL_ID, "stream": stream, "max_tokens": 4,
                    "messages": [{"role": "user", "content": "Hi"}]})
                assert response.status_code == 429
                assert int(response.headers["retry-after"]) >= 1
                assert response.json()["error"]["type"] == "rate_limit_error"
            scrape = (await http.get("/metrics")).text
            assert metric(scrape, "requests_rejected_total") >= 2
            assert metric(scrape, "requests_waiting") == 1
    finally:
        waiting.cancel()
        await cancel_all(busy)
    await wait_idle(llama)


@local_engine_only(
    "the harness serves each of the model's names as an upstream model of its own, so "
    "this /metrics line is another's; a replica's cache hits are tested in "
    "tests/engines/upstream")
async def test_second_chat_turn_hits_the_prefix_cache(server):
    async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as http:
        turn = [{"role": "user", "content": "Hi! What is the capital of France?"}]
        first = (await http.post(CHAT, json={"model": MODEL_ID, "messages": turn,
                                             "max_tokens": 20, "temperature": 0})).json()
        before = (await http.get("/metrics")).text
        turn += [first["choices"][0]["message"], {"role": "user", "content": "And Italy?"}]
        second = (await http.post(CHAT, json={"model": MODEL_ID, "messages": turn,
                                              "max_tokens": 8, "temperature": 0})).json()
        after = (await http.get("/metrics")).text
    assert metric(after, "prefix_cache_hits_total") == metric(before, "prefix_cache_hits_total") + 1
    cached = metric(after, "prompt_tokens_cached_total") - metric(before,
                                                                   "prompt_tokens_cached_total")
    assert cached >= first["usage"]["prompt_tokens"]
    evaluated = (metric(after, "prompt_tokens_evaluated_total")
                 - metric(before, "prompt_tokens_evaluated_total"))
    assert evaluated == second["usage"]["prompt_tokens"] - cached
    assert metric(after, "time_to_first_token_seconds_count") >= 2


async def test_no_kv_leak_after_500_requests_leaving_at_random(llama, server):
    rng = random.Random(1234)
    questions = ["Hi", "Tell me a joke.", "What is 2 + 2?", "Name a colour.", "Count to five."]
    limit = asyncio.Semaphore(12)  # more clients than slots: some wait in the queue

    async def one(http: httpx.AsyncClient, i: int) -> None:
        body = {"model": MODEL_ID, "max_tokens": rng.randint(1, 6), "temperature": 0.7,
                "messages": [{"role": "user", "content": rng.choice(questions)}]}
        leave_after = rng.choice([None, 0, 1, 2, 3])
        async with limit:
            if i % 3 == 0:  # non-stream: give up after a random short wait
                task = asyncio.create_task(http.post(CHAT, json=body))
                await asyncio.sleep(rng.random() * 0.05)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                return
            async with http.stream("POST", CHAT, json={**body, "stream": True}) as response:
                assert response.status_code == 200
                seen = 0
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        seen += 1
                        if leave_after is not None and seen > leave_after:
                            break  # closes the connection mid-stream

    async with httpx.AsyncClient(base_url=server.base_url, timeout=60,
                                 limits=httpx.Limits(max_connections=16)) as http:
        await asyncio.gather(*(one(http, i) for i in range(500)))
        await wait_idle(llama)
        scrape = (await http.get("/metrics")).text
    assert metric(scrape, "slots_in_use") == 0
    assert metric(scrape, "requests_running") == 0
    assert metric(scrape, "requests_waiting") == 0
    assert not kv_cache_mismatches(llama)
    assert sum(len(s.tokens) for s in llama.scheduler.slots.slots) <= SLOTS * 64  # only caches
