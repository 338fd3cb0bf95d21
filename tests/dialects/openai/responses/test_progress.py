"""Prompt-processing progress in a Responses stream, opted into with
`X-Parlance-Progress: on` (over HTTP, or once in a WebSocket handshake): each `PromptProgress`
the engine reports becomes a `parlance.prompt_progress` event numbered with the others;
without the header the stream is the API's own (no such event, the same events in the
same order); a background response never carries it; a bad value is a 400 in OpenAI's
envelope."""

from __future__ import annotations

import json
from typing import Any

import httpx
from websockets.asyncio.client import connect

from parlance.core.events import Finish, FinishReason, PromptProgress, TextDelta, Usage
from parlance.dialects.openai.responses.stream import PROMPT_PROGRESS
from parlance.engines.fake import FakeEngine
from tests.support.envelopes import checked_error
from tests.support.fake_app import make_app
from tests.support.live_server import serving
from tests.support.openresponses import checked_events
from tests.support.sse import sse_data

ASK = {"model": "fake-model", "input": "Summarise the long document.", "stream": True}
ON = {"X-Parlance-Progress": "on"}
STEPS = [(512, 1300), (1024, 1300), (1300, 1300)]


def script(engine: FakeEngine) -> None:
    engine.enqueue(*(PromptProgress(done, total) for done, total in STEPS), TextDelta("Done."),
                   Finish(FinishReason.STOP), Usage(1300, 2))


async def post(engine: FakeEngine, body: dict[str, Any], headers: dict[str, str]
               ) -> httpx.Response:
    transport = httpx.ASGITransport(app=make_app(engine), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test",
                                 timeout=60) as client:
        return await client.post("/v1/responses", json=body, headers=headers)


def progress_of(events: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(e["done"], e["total"]) for e in events if e.get("type") == PROMPT_PROGRESS]


async def test_the_opt_in_streams_each_progress_numbered_with_the_rest():
    engine = FakeEngine()
    script(engine)
    answer = await post(engine, ASK, ON)
    assert answer.status_code == 200, answer.text
    events = [e for e in sse_data(answer.text) if e != "[DONE]"]
    assert progress_of(events) == STEPS
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    names = [e["type"] for e in events]
    first_output = names.index("response.output_item.added")
    assert all(i < first_output for i, name in enumerate(names) if name == PROMPT_PROGRESS)
    blocks = [b for b in answer.text.split("\n\n") if PROMPT_PROGRESS in b]
    assert all(b.startswith(f"event: {PROMPT_PROGRESS}\n") for b in blocks)
    # what remains is the API's own stream, valid by the Open Responses types
    rest = [b for b in answer.text.split("\n\n") if PROMPT_PROGRESS not in b]
    checked_events("\n\n".join(rest))


async def test_without_the_header_the_stream_is_the_apis_own():
    asked, plain = FakeEngine(), FakeEngine()
    script(asked)
    script(plain)
    opted = [e for e in sse_data((await post(asked, ASK, ON)).text) if e != "[DONE]"]
    answer = await post(plain, ASK, {})
    events = checked_events(answer.text)
    assert PROMPT_PROGRESS not in answer.text
    assert [name for name, _ in events[:-1]] == [
        e["type"] for e in opted if e["type"] != PROMPT_PROGRESS]
    off = FakeEngine()
    script(off)
    assert PROMPT_PROGRESS not in (await post(off, ASK, {"X-Parlance-Progress": "off"})).text


async def test_a_background_response_never_carries_it():
    engine = FakeEngine()
    script(engine)
    answer = await post(engine, {**ASK, "background": True}, ON)
    assert answer.status_code == 200, answer.text
    assert PROMPT_PROGRESS not in answer.text
    assert sse_data(answer.text)[-2]["type"] == "response.completed"


async def test_a_bad_value_is_refused_in_openais_envelope():
    engine = FakeEngine()
    answer = await post(engine, ASK, {"X-Parlance-Progress": "verbose"})
    assert answer.status_code == 400
    error = checked_error("/v1/responses", answer)
    assert error["param"] == "X-Parlance-Progress" and "'on' or 'off'" in error["message"]
    assert engine.requests == []


async def test_websocket_mode_asks_in_the_handshake():
    engine = FakeEngine()
    script(engine)
    script(engine)
    message = {"type": "response.create", "model": "fake-model", "input": "Hi"}
    async with serving(make_app(engine)) as host:
        for headers, expected in ((ON, STEPS), ({}, [])):
            async with connect(f"ws://{host}/v1/responses", additional_headers=headers) as ws:
                await ws.send(json.dumps(message))
                events = [json.loads(await ws.recv())]
                while events[-1]["type"] != "response.completed":
                    events.append(json.loads(await ws.recv()))
            assert progress_of(events) == expected
            assert [e["sequence_number"] for e in events] == list(range(len(events)))
