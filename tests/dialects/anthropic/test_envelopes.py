"""Refusals the server answers before any endpoint runs (the origin guard, the body
limit, the drain) reach Anthropic's clients in Anthropic's envelope on /v1/messages,
and a stream the drain ends gets an `event: error`."""

from __future__ import annotations

import asyncio
import json

import httpx

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine
from tests.support.anthropic_contract import check_error, stream_events
from tests.support.asgi_exchange import Exchange, exchange, until
from tests.support.fake_app import make_app

HELLO = {"model": "fake-model", "max_tokens": 16,
         "messages": [{"role": "user", "content": "Hello!"}]}


def client_for(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                             base_url="http://127.0.0.1:8080")


async def test_foreign_origin_is_403_permission_error():
    engine = FakeEngine()
    async with client_for(make_app(engine, bind_host="127.0.0.1")) as client:
        refused = await client.post("/v1/messages?beta=true", content=json.dumps(HELLO),
                                    headers={"content-type": "text/plain",
                                             "origin": "https://evil.example"})
    assert refused.status_code == 403
    assert check_error(refused.json())["type"] == "permission_error"
    assert engine.requests == []


async def test_body_over_the_limit_is_413_request_too_large():
    async with client_for(make_app(FakeEngine(), max_body_bytes=1024)) as client:
        body = {**HELLO, "messages": [{"role": "user", "content": "x" * 4096}]}
        refused = await client.post("/v1/messages", json=body)
        counted = await client.post("/v1/messages/count_tokens", json=body)
    for response in (refused, counted):
        assert response.status_code == 413
        assert check_error(response.json())["type"] == "request_too_large"


async def test_drain_refuses_new_messages_and_ends_running_streams_with_an_error_event():
    engine = FakeEngine()
    engine.enqueue(TextDelta("Hi"), 600.0, Finish(FinishReason.STOP), Usage(1, 1))
    app = make_app(engine, shutdown_grace=0.05)
    running = asyncio.create_task(exchange(app, "/v1/messages", {**HELLO, "stream": True}))
    await until(lambda: bool(engine.generations and engine.generations[0].yielded),
                "the stream under way")
    app.state.drain.begin()
    late = await exchange(app, "/v1/messages", HELLO)
    done = await running
    assert late.status == 503
    assert check_error(late.json())["type"] == "api_error"
    events = stream_events(done.text)
    assert events[-1]["type"] == "error" and events[-1]["error"]["type"] == "api_error"
    assert done.ended


async def test_idle_stream_keeps_alive_with_ping_events():
    """While the engine is silent the stream carries Anthropic's `ping` events (not SSE
    comments); the client leaving after two of them cancels the generation."""
    engine = FakeEngine()
    engine.enqueue(3600.0, TextDelta("late"), Finish(FinishReason.STOP), Usage(1, 1))
    app = make_app(engine, keepalive_seconds=0.1)
    leave = asyncio.Event()
    out = Exchange()
    task = asyncio.create_task(exchange(app, "/v1/messages", {**HELLO, "stream": True},
                                        leave=leave, out=out))
    # message_start and the first ping come at once; then two pings while idle
    await until(lambda: len(out.chunks) >= 4, "two idle pings")
    leave.set()
    await task
    events = stream_events(b"".join(out.chunks[:4]).decode())
    assert [e["type"] for e in events] == ["message_start", "ping", "ping", "ping"]
    await until(lambda: engine.generations[-1].cancelled, "the generation cancelled")
