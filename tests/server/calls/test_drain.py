"""Graceful shutdown with the fake engine: while the server drains, new requests get
503 in their API's envelope, running generations may finish within the grace, and
those still running then end by their dialect's contract (a non-stream one with 503).
"""

from __future__ import annotations

import asyncio
import threading

import httpx

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine
from parlance.models.registry import BUILTIN, ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.asgi_exchange import exchange, until
from tests.support.fake_app import FAKE_SPEC, make_app

SHUTTING_DOWN = "server_shutting_down"
HELLO = [{"role": "user", "content": "Hello!"}]
STREAMS = {
    "/v1/chat/completions": {"messages": HELLO, "stream": True},
    "/v1/completions": {"prompt": "Hello", "stream": True},
    "/v1/responses": {"input": "Hello!", "stream": True},
    "/api/v1/chat": {"model": "fake-model", "input": "Hello!", "stream": True},
}


def endless(engine: FakeEngine, count: int) -> None:
    """Scripts that yield one delta, then wait far longer than any test runs."""
    for _ in range(count):
        engine.enqueue(TextDelta("Hi"), 600.0, Finish(FinishReason.STOP), Usage(1, 1))


async def test_drain_ends_every_running_generation_by_its_contract(tmp_path):
    engine = FakeEngine()
    endless(engine, len(STREAMS) + 1)
    app = make_app(engine, data_dir=tmp_path, shutdown_grace=0.05)
    running = {path: asyncio.create_task(exchange(app, path, body))
               for path, body in STREAMS.items()}
    running["non-stream"] = asyncio.create_task(
        exchange(app, "/v1/chat/completions", {"messages": HELLO}))
    await until(lambda: len(engine.generations) == 5 and all(
        g.yielded for g in engine.generations), "every generation under way")

    app.state.drain.begin()
    late_openai = await exchange(app, "/v1/chat/completions", {"messages": HELLO})
    late_lmstudio = await exchange(app, "/api/v1/chat", {"model": "fake-model", "input": "x"})
    done = {name: await task for name, task in running.items()}

    assert late_openai.status == 503 and late_openai.headers["connection"] == "close"
    assert late_openai.json()["error"] == {
        "message": late_openai.json()["error"]["message"], "type": "server_error",
        "param": None, "code": SHUTTING_DOWN}
    assert late_lmstudio.status == 503
    assert late_lmstudio.json()["error"]["type"] == "unknown"
    assert late_lmstudio.json()["error"]["code"] == SHUTTING_DOWN

    assert all(exchanged.ended for exchanged in done.values())  # every body was ended
    assert all(g.cancelled for g in engine.generations)

    chat = done["/v1/chat/completions"].sse()
    assert chat[-2]["error"]["code"] == SHUTTING_DOWN and chat[-1] == "[DONE]"
    completions = done["/v1/completions"].sse()
    assert completions[-2]["error"]["code"] == SHUTTING_DOWN and completions[-1] == "[DONE]"

    responses = done["/v1/responses"]
    assert responses.events()[-1] == "response.failed"
    failed = responses.sse()[-2]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == SHUTTING_DOWN
    assert responses.sse()[-1] == "[DONE]"

    lmstudio = done["/api/v1/chat"]
    assert lmstudio.events()[-2:] == ["error", "chat.end"]
    assert lmstudio.sse()[-2]["error"]["code"] == SHUTTING_DOWN

    non_stream = done["non-stream"]
    assert non_stream.status == 503
    assert non_stream.json()["error"]["code"] == SHUTTING_DOWN

    # Stored as failed: a server started later over the same data finds it so.
    later = make_app(FakeEngine(), data_dir=tmp_path)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=later),
                                 base_url="http://t") as client:
        stored = await client.get(f"/v1/responses/{failed['id']}")
    assert stored.status_code == 200 and stored.json()["status"] == "failed"


async def test_generation_that_ends_within_the_grace_ends_normally():
    engine = FakeEngine()
    engine.enqueue(TextDelta("Hi"), 0.2, TextDelta(" there"), Finish(FinishReason.STOP),
                   Usage(1, 2))
    app = make_app(engine, shutdown_grace=600.0)
    task = asyncio.create_task(exchange(app, "/v1/chat/completions",
                                        {"messages": HELLO, "stream": True}))
    await until(lambda: engine.generations and engine.generations[0].yielded, "under way")
    app.state.drain.begin()
    frames = (await task).sse()
    assert frames[-2]["choices"][0]["finish_reason"] == "stop" and frames[-1] == "[DONE]"
    assert not any("error" in f for f in frames if isinstance(f, dict))
    assert engine.generations[0].finished


async def test_generation_started_after_the_grace_is_stopped_at_once():
    """A request admitted just before the drain, whose generation starts after the grace
    ended, does not run on."""
    engine = FakeEngine()
    endless(engine, 1)
    app = make_app(engine, shutdown_grace=0.0)
    drain = app.state.drain
    drain.end_grace()
    drain.draining = False  # as if the request had passed admission just before
    frames = (await exchange(app, "/v1/chat/completions",
                             {"messages": HELLO, "stream": True})).sse()
    assert frames[-2]["error"]["code"] == SHUTTING_DOWN and frames[-1] == "[DONE]"
    assert engine.generations[0].yielded == []


async def test_a_model_load_under_way_does_not_hold_the_drain():
    """A stream whose cold model is still loading when the grace ends is ended then
    (the load runs on in the background); it does not wait for the load."""
    release = threading.Event()
    called = threading.Event()

    def loader(spec, plan, on_progress):
        called.set()
        release.wait(60)
        return FakeEngine()

    cold = ModelSpec(id="acme/cold", locate=lambda: BUILTIN[0].locate())
    models = ServedModels([ServedModel(FAKE_SPEC, FakeEngine(), 1700000000)],
                          catalog=lambda: [cold], loader=loader)
    app = create_app(models, ServerSettings(shutdown_grace=0.0))
    task = asyncio.create_task(exchange(app, "/api/v1/chat", {
        "model": "acme/cold", "input": "Hello!", "stream": True}))
    try:
        await until(called.is_set, "the load under way")
        app.state.drain.begin()
        answer = await task
    finally:
        release.set()
    assert answer.events()[-2:] == ["error", "chat.end"]
    assert answer.sse()[-2]["error"]["code"] == SHUTTING_DOWN
