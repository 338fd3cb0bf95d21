"""`GET /v1/responses/{id}?stream=true&starting_after=N`: the cursor is a sequence
number of the stream, so one before the first event or past the last sent is a 400
naming it, before any byte of a stream; the last one gives just the end."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine
from tests.support.fake_app import make_app
from tests.support.live_server import serving
from tests.support.sse import sse_data

RESPONSES = "/v1/responses"
HELLO = {"model": "fake-model", "input": "Hi"}
WAIT = 30.0


def numbers(text: str) -> list[int | str]:
    return [d if d == "[DONE]" else d["sequence_number"] for d in sse_data(text)]


def refused(response: httpx.Response) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "starting_after" and error["type"] == "invalid_request_error"


@pytest.mark.parametrize("cursor", [-1, -2, -5, -10**6, 10**6, 2**63])
async def test_a_stored_stream_refuses_a_cursor_out_of_range(client, fake_engine, cursor):
    fake_engine.enqueue(TextDelta("Hi"), Finish(FinishReason.STOP), Usage(5, 1))
    body = (await client.post(RESPONSES, json=HELLO)).json()
    refused(await client.get(f"{RESPONSES}/{body['id']}",
                             params={"stream": "true", "starting_after": cursor}))


async def test_a_stored_stream_after_its_last_event_is_only_the_end(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hi"), Finish(FinishReason.STOP), Usage(5, 1))
    body = (await client.post(RESPONSES, json=HELLO)).json()
    whole = numbers((await client.get(f"{RESPONSES}/{body['id']}",
                                      params={"stream": "true"})).text)
    last = whole[-2]
    assert whole == [*range(last + 1), "[DONE]"]
    tail = await client.get(f"{RESPONSES}/{body['id']}",
                            params={"stream": "true", "starting_after": last})
    assert numbers(tail.text) == ["[DONE]"]
    refused(await client.get(f"{RESPONSES}/{body['id']}",
                             params={"stream": "true", "starting_after": last + 1}))


async def test_a_running_background_stream_refuses_cursors_it_has_not_sent():
    engine = FakeEngine()
    gate = asyncio.Event()
    engine.enqueue(gate, TextDelta("Once"), Finish(FinishReason.STOP), Usage(4, 5))
    async with serving(make_app(engine)) as host, httpx.AsyncClient(
            base_url=f"http://{host}", timeout=WAIT) as http:
        created = (await http.post(RESPONSES, json={**HELLO, "background": True})).json()
        url = f"{RESPONSES}/{created['id']}"
        # held at the gate: created and queued are sent (0 and 1), nothing after them
        for cursor in (-1, -2, -3, -10**9, 2, 3, 10**9):
            refused(await http.get(url, params={"stream": "true", "starting_after": cursor}))
        async with http.stream("GET", url, params={"stream": "true",
                                                   "starting_after": 1}) as live:
            assert live.status_code == 200
            gate.set()
            text = "".join([chunk async for chunk in live.aiter_text()])
        seen = numbers(text)
        assert seen[0] == 2 and seen[-1] == "[DONE]"
        assert seen[:-1] == list(range(2, seen[-2] + 1))  # in order, none twice
        last = seen[-2]
        # finished and still kept: the last event gives just the end; past it, a 400
        tail = await http.get(url, params={"stream": "true", "starting_after": last})
        assert numbers(tail.text) == ["[DONE]"]
        refused(await http.get(url, params={"stream": "true", "starting_after": last + 1}))
