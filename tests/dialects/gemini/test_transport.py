"""What every dialect's stream holds to, for Gemini's two stream framings: a silent
engine (a long prompt being evaluated) is filled with SSE comments under `alt=sse`
and with whitespace inside the JSON array, both of which the SDKs skip; a client that
leaves mid-stream cancels the generation; a cached prompt prefix is reported as
`cachedContentTokenCount`."""

from __future__ import annotations

import asyncio
import json

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine
from tests.support.asgi_exchange import Exchange, exchange, until
from tests.support.fake_app import make_app

STREAM = "/v1beta/models/fake-model:streamGenerateContent"
HELLO = {"contents": [{"role": "user", "parts": [{"text": "Hello!"}]}]}
PATIENCE = 60.0  # a generous bound for every wait (the machine may be busy); nothing is timed


async def test_a_silent_sse_stream_is_kept_alive_with_comments():
    engine = FakeEngine()
    engine.enqueue(3600.0, TextDelta("late"), Finish(FinishReason.STOP), Usage(1, 1))
    chunks = (await exchange(make_app(engine, keepalive_seconds=0.1), STREAM + "?alt=sse",
                             HELLO, leave_after=2, timeout=PATIENCE)).chunks
    assert len(chunks) == 2
    assert all(c.startswith(b": ") and c.endswith(b"\n\n") for c in chunks)
    assert engine.generations[-1].cancelled


async def test_a_silent_json_array_stream_is_kept_alive_with_whitespace():
    engine, gate, out = FakeEngine(), asyncio.Event(), Exchange()
    engine.enqueue(gate, TextDelta("late"), Finish(FinishReason.STOP), Usage(1, 1))
    answered = asyncio.ensure_future(exchange(make_app(engine, keepalive_seconds=0.05),
                                              STREAM, HELLO, timeout=PATIENCE, out=out))
    await until(lambda: out.chunks.count(b"\n") >= 2, "two keepalives", PATIENCE)
    gate.set()  # the engine speaks again
    await answered
    assert out.chunks[0] == b"["  # the array opens at once; whitespace fills the silence
    chunks = json.loads(out.text)  # still one JSON array
    assert chunks[-1]["candidates"][0]["content"]["parts"] == [{"text": "late"}]


async def test_leaving_mid_stream_cancels_the_generation():
    for path in (STREAM + "?alt=sse", STREAM):
        engine = FakeEngine()
        engine.enqueue(*[x for i in range(1000) for x in (TextDelta(f"t{i}"), 0.002)])
        chunks = (await exchange(make_app(engine), path, HELLO, leave_after=3,
                                 timeout=PATIENCE)).chunks
        generation = engine.generations[-1]
        assert generation.cancelled and not generation.finished, path
        assert len(generation.yielded) < 50 and len(chunks) < 50, path


async def test_cached_prompt_tokens_are_reported(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hi"), Finish(FinishReason.STOP), Usage(40, 1, cached_tokens=32))
    answer = (await client.post("/v1beta/models/fake-model:generateContent", json=HELLO)).json()
    assert answer["usageMetadata"]["cachedContentTokenCount"] == 32
    assert answer["usageMetadata"]["promptTokenCount"] == 40
