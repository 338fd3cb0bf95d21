"""While a long prompt is evaluated, Chat and Completions streams carry chunks without
choices and a Responses stream repeats `response.in_progress` (until its output
begins), so clients whose idle timer counts data lines or events (Qwen Code, Codex)
see progress; the official SDK's accumulators take both in their stride, and each
event stays valid for the Open Responses types."""

from __future__ import annotations

import httpx

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine
from tests.support.fake_app import make_app
from tests.support.openai_sdk import sdk
from tests.support.openresponses import checked_events
from tests.support.sse import sse_data

PAUSE = 0.5  # the engine's silence; pings come every 0.05 s (at least a few, however busy)
KEEPALIVE = 0.05


def slow(engine: FakeEngine, *texts: str) -> None:
    engine.enqueue(PAUSE, *(TextDelta(t) for t in texts), Finish(FinishReason.STOP),
                   Usage(5, len(texts)))


async def test_chat_idle_chunks_pass_the_sdks_accumulator():
    engine = FakeEngine()
    slow(engine, "Hello", " there")
    client = sdk(engine, keepalive_seconds=KEEPALIVE)
    async with client.chat.completions.stream(
            model="fake-model", messages=[{"role": "user", "content": "Hi"}],
            stream_options={"include_usage": True}) as stream:
        chunks = [event.chunk async for event in stream if event.type == "chunk"]
        final = await stream.get_final_completion()
    idle = [c for c in chunks if not c.choices and c.usage is None]
    assert idle and all(c.id == chunks[0].id for c in idle)
    assert final.choices[0].message.content == "Hello there"
    assert final.choices[0].finish_reason == "stop"
    assert final.usage is not None and final.usage.completion_tokens == 2


async def test_completions_idle_chunks_keep_the_streams_envelope():
    engine = FakeEngine()
    slow(engine, "Once")
    app = make_app(engine, keepalive_seconds=KEEPALIVE)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as http:
        body = (await http.post("/v1/completions", json={
            "model": "fake-model", "prompt": "Tell", "stream": True})).text
    chunks = [c for c in sse_data(body) if isinstance(c, dict)]
    idle = [c for c in chunks if c["choices"] == []]
    assert idle and {c["id"] for c in chunks} == {chunks[0]["id"]}
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == "Once"


async def test_responses_repeat_in_progress_only_before_output():
    engine = FakeEngine()
    engine.enqueue(PAUSE, TextDelta("Hel"), PAUSE, TextDelta("lo"),
                   Finish(FinishReason.STOP), Usage(5, 2))
    app = make_app(engine, keepalive_seconds=KEEPALIVE)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as http:
        body = (await http.post("/v1/responses", json={
            "model": "fake-model", "input": "Hi", "stream": True})).text
    frames = "\n\n".join(b for b in body.split("\n\n") if not b.startswith(": "))
    events = [data for _, data in checked_events(frames) if isinstance(data, dict)]
    kinds = [e["type"] for e in events]
    first_output = kinds.index("response.output_item.added")
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[2:first_output].count("response.in_progress") == first_output - 2 > 0
    assert "response.in_progress" not in kinds[first_output:]  # comments from then on
    assert ": " in body.split("response.output_item.added", 1)[1]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert len({e["response"]["id"] for e in events if "response" in e}) == 1


async def test_the_sdks_response_stream_accumulates_through_repeated_in_progress():
    engine = FakeEngine()
    slow(engine, "Hello", " there")
    client = sdk(engine, keepalive_seconds=KEEPALIVE)
    async with client.responses.stream(model="fake-model", input="Hi") as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert kinds.count("response.in_progress") > 1
    assert final.output_text == "Hello there" and final.status == "completed"
