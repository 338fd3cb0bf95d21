"""Ollama's model lifetime through `/api/chat` and `/api/generate` with a scripted
loader: `options.num_ctx` is the context a cold model loads with, `load_duration`
reports the load the call waited for, `keep_alive` (0 unloads after the call, negative
keeps forever, a duration replaces the idle TTL) drives the same reaper as the
just-in-time TTL, and an unload asked while a call runs waits for it."""

from __future__ import annotations

import asyncio
import time

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from tests.support.ollama_contract import check_line, check_stream
from tests.support.scripted_models import COLD_NAME, unloaded

COLD = COLD_NAME
HI = [{"role": "user", "content": "Hi"}]


async def test_num_ctx_loads_a_cold_model_with_that_context_and_reports_the_load(scripted):
    models, client, loader = scripted
    response = await client.post("/api/chat", json={"model": COLD, "messages": HI,
                                                    "options": {"num_ctx": 1024}})
    lines = check_stream(response.text, generate=False)
    assert loader.loaded == [COLD]
    model, _ = models.resolve(COLD)
    assert model.engine.context_length == 1024 and model.config["context_length"] == 1024
    assert lines[-1]["load_duration"] > 0  # this call waited for the load
    again = (await client.post("/api/chat", json={"model": COLD, "messages": HI,
                                                  "stream": False})).json()
    assert again["load_duration"] > 0  # loaded already: the time it took to find it


async def test_an_absurd_num_ctx_is_a_400_before_anything_loads(scripted):
    models, client, loader = scripted
    response = await client.post("/api/chat", json={"model": COLD, "messages": HI,
                                                    "options": {"num_ctx": 10**9}})
    assert response.status_code == 400, response.text
    assert "error" in response.json() and loader.loaded == []


async def test_load_only_with_num_ctx_then_unload(scripted):
    models, client, loader = scripted
    loaded = (await client.post("/api/generate", json={
        "model": COLD, "options": {"num_ctx": 512}})).json()
    check_line(loaded, generate=True)
    assert loaded["done_reason"] == "load" and loader.loaded == [COLD]
    assert models.resolve(COLD)[0].engine.context_length == 512
    gone = (await client.post("/api/chat", json={"model": COLD, "messages": [],
                                                 "keep_alive": 0})).json()
    assert gone["done_reason"] == "unload" and not models.is_loaded(COLD)


async def test_keep_alive_0_unloads_once_the_call_ends(scripted):
    models, client, _ = scripted
    response = await client.post("/api/generate", json={"model": COLD, "prompt": "Hi",
                                                        "keep_alive": 0, "stream": False})
    assert response.json()["done"] is True
    await unloaded(models, COLD)


async def test_a_negative_keep_alive_outlives_the_idle_ttl_until_a_call_without_one(scripted):
    models, client, _ = scripted
    await client.post("/api/chat", json={"model": COLD, "messages": HI, "keep_alive": -1,
                                         "stream": False})
    model, _ = models.resolve(COLD)
    assert models.ttl(model) is None and models.expires_at(model) is None
    assert await models.unload_idle(now=time.monotonic() + 10**9) == []
    # every call sets the keep_alive anew, as Ollama's do: none given is the server's rule
    await client.post("/api/chat", json={"model": COLD, "messages": HI, "stream": False})
    assert models.ttl(model) == 3600
    assert await models.unload_idle(now=time.monotonic() + 7200) == [COLD]


async def test_a_duration_replaces_the_idle_ttl_and_the_reaper_keeps_it(scripted):
    models, client, _ = scripted
    await client.post("/api/chat", json={"model": COLD, "messages": HI, "keep_alive": "5m",
                                         "stream": False})
    model, _ = models.resolve(COLD)
    assert models.ttl(model) == 300
    expires = models.expires_at(model)
    assert expires is not None and time.time() < expires <= time.time() + 300
    assert await models.unload_idle(now=time.monotonic() + 200) == []
    assert await models.unload_idle(now=time.monotonic() + 400) == [COLD]
    # a pinned model (loaded at start, no TTL) goes too when a call asks
    await client.post("/api/chat", json={"model": "fake-model", "messages": HI,
                                         "keep_alive": "50ms", "stream": False})
    await unloaded(models, "fake-model")


async def test_an_unload_asked_while_a_call_runs_waits_for_it(scripted):
    models, client, _ = scripted
    await client.post("/api/generate", json={"model": COLD})  # load it
    model, _ = models.resolve(COLD)
    gate = asyncio.Event()
    model.engine.enqueue(TextDelta("Hi"), gate, Finish(FinishReason.STOP), Usage(1, 1))
    model.engine.metrics.requests_running = 1  # (the fake engine does not count its own)

    async def call() -> str:
        response = await client.post("/api/chat", json={"model": COLD, "messages": HI})
        return response.text

    running = asyncio.ensure_future(call())
    while not model.engine.generations:
        await asyncio.sleep(0.01)
    answer = (await client.post("/api/generate", json={"model": COLD,
                                                       "keep_alive": 0})).json()
    assert answer["done_reason"] == "unload"
    assert models.is_loaded(COLD)  # the running call goes on
    gate.set()
    lines = check_stream(await running, generate=False)
    assert lines[-1]["done"] is True and "".join(
        ln["message"]["content"] for ln in lines) == "Hi"
    model.engine.metrics.requests_running = 0  # (as a real engine's count drops after it)
    await unloaded(models, COLD)
