"""Transport behaviour, once for every dialect: keepalive, disconnect → cancel,
request timeout, auth, unknown routes. Raw ASGI where timing matters."""

from __future__ import annotations

import asyncio
import json

import httpx

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine
from tests.support.asgi_exchange import exchange
from tests.support.fake_app import make_app
from tests.support.sse import sse_data

CHAT = "/v1/chat/completions"
HELLO = {"messages": [{"role": "user", "content": "Hello!"}]}
PATIENCE = 60.0  # a generous bound for every wait (the machine may be busy); nothing is timed


async def test_keepalive_while_engine_is_silent():
    """A dialect whose stream has no progress frame of its own (LM Studio) sends SSE
    comments while the engine is silent; Chat sends chunks without choices (a data line
    the same stream's id, for clients whose idle timer ignores comments)."""
    for path, body in (("/api/v1/chat", {"model": "fake-model", "input": "Hello!"}),
                       (CHAT, HELLO)):
        engine = FakeEngine()
        engine.enqueue(3600.0, TextDelta("late"), Finish(FinishReason.STOP), Usage(1, 1))
        app = make_app(engine, keepalive_seconds=0.1)
        # silent until the client leaves: after the opening frames and two pings, however
        # long those take to come on a busy machine
        opening = 1 if path == CHAT else 2
        chunks = (await exchange(app, path, {**body, "stream": True},
                                 leave_after=opening + 2, timeout=PATIENCE)).chunks
        pings = chunks[opening:]
        assert len(pings) == 2
        if path == CHAT:
            first = sse_data(chunks[0].decode())[0]
            assert first["choices"][0]["delta"]["role"] == "assistant"
            idle = [sse_data(c.decode())[0] for c in pings]
            assert all(i == {**first, "choices": []} for i in idle)
        else:
            assert all(c.startswith(b": ") and c.endswith(b"\n\n")
                       and float(c[2:].decode()) > 0 for c in pings)
        assert engine.generations[-1].cancelled


async def test_disconnect_mid_stream_cancels_generation():
    engine = FakeEngine()
    engine.enqueue(*[x for i in range(1000) for x in (TextDelta(f"t{i}"), 0.002)])
    app = make_app(engine)
    chunks = (await exchange(app, CHAT, {**HELLO, "stream": True}, leave_after=3,
                             timeout=PATIENCE)).chunks
    generation = engine.generations[-1]
    assert generation.cancelled
    assert not generation.finished
    assert len(generation.yielded) < 50
    assert len(chunks) < 50


async def test_disconnect_during_non_stream_cancels_generation():
    engine = FakeEngine()
    engine.enqueue(3600.0, TextDelta("never"), Finish(FinishReason.STOP), Usage(1, 1))
    app = make_app(engine)
    disconnect_soon = asyncio.get_running_loop().call_later

    sent: list[dict] = []
    gone = asyncio.Event()
    disconnect_soon(0.1, gone.set)
    delivered = False

    async def receive():
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": json.dumps(HELLO).encode(),
                    "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": CHAT, "raw_path": CHAT.encode(),
             "query_string": b"", "headers": [], "server": ("t", 80), "client": ("t", 1)}
    await asyncio.wait_for(app(scope, receive, send), PATIENCE)
    assert engine.generations[-1].cancelled
    assert engine.generations[-1].yielded == []


async def test_request_timeout_stream_ends_with_timeout_error_frame():
    engine = FakeEngine()
    engine.enqueue(TextDelta("a"), 3600.0, TextDelta("b"))
    app = make_app(engine, request_timeout=0.2)
    frames = (await exchange(app, CHAT, {**HELLO, "stream": True}, timeout=PATIENCE)).sse()
    assert frames[-2] == {"error": {"message": "The request ran past the server's request "
                                               "timeout.", "type": "timeout_error",
                                    "param": None, "code": "request_timeout"}}
    assert frames[-1] == "[DONE]"
    assert engine.generations[-1].cancelled


async def test_request_timeout_non_stream_is_408():
    engine = FakeEngine()
    engine.enqueue(3600.0, TextDelta("b"))
    transport = httpx.ASGITransport(app=make_app(engine, request_timeout=0.2))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.post(CHAT, json=HELLO)
    assert response.status_code == 408
    assert response.json()["error"]["code"] == "request_timeout"


async def test_api_keys_protect_v1_but_not_health():
    transport = httpx.ASGITransport(app=make_app(FakeEngine(), api_keys=("k1", "k2")))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        missing = await client.post(CHAT, json={**HELLO, "stream": True})
        wrong = await client.get("/v1/models", headers={"authorization": "Bearer nope"})
        right = await client.post(CHAT, json=HELLO, headers={"authorization": "Bearer k2"})
        x_api_key = await client.get("/v1/models", headers={"x-api-key": "k1"})
        health = await client.get("/health")
        probe = await client.head("/")  # Claude Code's and Ollama apps' liveness probe
    assert missing.status_code == wrong.status_code == 401
    assert probe.status_code == 200
    assert missing.json()["error"]["type"] == "authentication_error"
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    assert right.status_code == x_api_key.status_code == health.status_code == 200


async def test_models_endpoints(client):
    listing = (await client.get("/v1/models")).json()
    assert listing == {"object": "list", "data": [
        {"id": "fake-model", "object": "model", "created": 1700000000, "owned_by": "parlance"}]}
    assert (await client.get("/v1/models/fake-alias")).json()["id"] == "fake-alias"
    missing = await client.get("/v1/models/nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


async def test_unknown_route_and_wrong_method_use_openai_envelope(client):
    missing = await client.post("/v1/nothing", json={})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_url"
    wrong = await client.get(CHAT)
    assert wrong.status_code == 405 and wrong.json()["error"]["type"] == "invalid_request_error"


async def test_routes_without_v1_prefix_work(client):
    assert (await client.post("/chat/completions", json=HELLO)).status_code == 200
    assert (await client.post("/completions", json={"prompt": "x"})).status_code == 200
