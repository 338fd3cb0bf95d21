"""Background responses (`background: true`) over a real loopback server and the fake
engine, whose gates hold the generation where a test wants it: polled through queued,
in progress and the end; streamed, left and resumed live; cancelled; bounded; marked
failed by a restart and by the drain. The openai SDK (strict) and the Open Responses
types are the oracles."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine
from parlance.server.calls import background
from parlance.store.responses import ResponseStore
from tests.support.fake_app import make_app
from tests.support.live_server import serving
from tests.support.openresponses import check_event, check_response

RESPONSES = "/v1/responses"
BACKGROUND = {"model": "fake-model", "input": "Tell me a story.", "background": True}
WAIT = 30.0  # generous: a busy machine


def gated(engine: FakeEngine) -> tuple[asyncio.Event, asyncio.Event]:
    """The next response waits at `first` before any output, and at `second` before it ends."""
    first, second = asyncio.Event(), asyncio.Event()
    engine.enqueue(first, TextDelta("Once"), second, TextDelta(" upon a time."),
                   Finish(FinishReason.STOP), Usage(4, 5))
    return first, second


async def until_status(http: httpx.AsyncClient, response_id: str, *wanted: str) -> dict:
    for _ in range(int(WAIT / 0.01)):
        body = (await http.get(f"{RESPONSES}/{response_id}")).json()
        if body["status"] in wanted:
            check_response(body)
            return body
        await asyncio.sleep(0.01)
    raise AssertionError(f"{response_id} never reached {wanted}: {body['status']}")


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[Any]:
    """Each SSE frame's data as it arrives ("[DONE]" as is), checked on the way."""
    async for line in lines:
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            if data == "[DONE]":
                yield data
                return
            event = json.loads(data)
            check_event(event)
            yield event


async def test_polled_from_queued_through_in_progress_to_completed():
    engine = FakeEngine()
    first, second = gated(engine)
    async with serving(make_app(engine)) as host, httpx.AsyncClient(
            base_url=f"http://{host}") as http:
        created = (await http.post(RESPONSES, json=BACKGROUND)).json()
        check_response(created)
        assert created["status"] == "queued" and created["background"] is True
        assert created["output"] == []
        assert (await http.get(f"{RESPONSES}/{created['id']}")).json()["status"] == "queued"
        first.set()
        running = await until_status(http, created["id"], "in_progress")
        assert running["completed_at"] is None
        second.set()
        done = await until_status(http, created["id"], "completed")
    assert done["output"][0]["content"][0]["text"] == "Once upon a time."
    assert done["usage"]["output_tokens"] == 5 and done["background"] is True


async def test_streamed_left_and_resumed_live():
    engine = FakeEngine()
    first, second = gated(engine)
    async with serving(make_app(engine)) as host, httpx.AsyncClient(
            base_url=f"http://{host}", timeout=WAIT) as http:
        async with http.stream("POST", RESPONSES, json={**BACKGROUND, "stream": True}) as sse:
            events = sse_events(sse.aiter_lines())
            created = await anext(events)
            queued = await anext(events)
        # the client left after two events; the response goes on without it
        assert [created["type"], queued["type"]] == ["response.created", "response.queued"]
        response_id = created["response"]["id"]
        url = f"{RESPONSES}/{response_id}?stream=true&starting_after=1"
        async with http.stream("GET", url) as resumed:
            events = sse_events(resumed.aiter_lines())
            first.set()  # the resumed stream is live: what follows arrives as it happens
            seen = [await anext(events), await anext(events), await anext(events)]
            assert [e["type"] for e in seen] == [
                "response.in_progress", "response.output_item.added",
                "response.content_part.added"]
            second.set()
            seen += [event async for event in events]
        assert seen[-1] == "[DONE]" and seen[-2]["type"] == "response.completed"
        assert [e["sequence_number"] for e in seen[:-1]] == list(range(2, len(seen) + 1))
        text = "".join(e["delta"] for e in seen[:-1]
                       if e["type"] == "response.output_text.delta")
        assert text == "Once upon a time."
        # once it has finished, the same stream is still there (from the start this time)
        again = await http.get(f"{RESPONSES}/{response_id}?stream=true")
        frames = [line.removeprefix("data: ") for line in again.text.splitlines()
                  if line.startswith("data: ")]
        assert [json.loads(f)["type"] for f in frames[:3]] == [
            "response.created", "response.queued", "response.in_progress"]
        assert len(frames) == len(seen) + 2


async def test_cancel_stops_it_and_is_idempotent():
    engine = FakeEngine()
    gated(engine)  # never opened
    async with serving(make_app(engine)) as host, httpx.AsyncClient(
            base_url=f"http://{host}", timeout=WAIT) as http:
        created = (await http.post(RESPONSES, json=BACKGROUND)).json()
        follower = asyncio.create_task(http.get(
            f"{RESPONSES}/{created['id']}?stream=true&starting_after=0"))
        cancelled = (await http.post(f"{RESPONSES}/{created['id']}/cancel")).json()
        check_response(cancelled)
        assert cancelled["status"] == "cancelled"
        assert engine.generations[-1].cancelled
        assert (await http.get(f"{RESPONSES}/{created['id']}")).json() == cancelled
        again = (await http.post(f"{RESPONSES}/{created['id']}/cancel")).json()
        assert again == cancelled
        stream = (await follower).text  # a follower sees the end, by the stream's contract
        assert stream.rstrip().endswith("data: [DONE]")
        last = stream.rsplit("event: ", 1)[1]
        assert last.startswith("response.incomplete") and '"status":"cancelled"' in last
        foreground = (await http.post(RESPONSES, json={**BACKGROUND,
                                                       "background": False})).json()
        refused = await http.post(f"{RESPONSES}/{foreground['id']}/cancel")
        assert refused.status_code == 400


async def test_openai_sdk_background_poll_and_cancel():
    engine = FakeEngine()
    first, second = gated(engine)
    gated(engine)  # the second response: never opened
    async with serving(make_app(engine)) as host, openai.AsyncOpenAI(
            base_url=f"http://{host}/v1", api_key="k", max_retries=0,
            _strict_response_validation=True) as client:
        created = await client.responses.create(model="fake-model", input="Story?",
                                                background=True)
        assert created.status == "queued" and created.background
        first.set()
        second.set()
        for _ in range(int(WAIT / 0.01)):
            polled = await client.responses.retrieve(created.id)
            if polled.status == "completed":
                break
            await asyncio.sleep(0.01)
        assert polled.output_text == "Once upon a time."
        other = await client.responses.create(model="fake-model", input="Another?",
                                              background=True)
        cancelled = await client.responses.cancel(other.id)
        assert cancelled.status == "cancelled"


async def test_bounded_in_number(monkeypatch):
    monkeypatch.setattr(background, "MAX_RUNNING", 1)
    engine = FakeEngine()
    first, second = gated(engine)
    async with serving(make_app(engine)) as host, httpx.AsyncClient(
            base_url=f"http://{host}") as http:
        running = (await http.post(RESPONSES, json=BACKGROUND)).json()
        refused = await http.post(RESPONSES, json=BACKGROUND)
        assert refused.status_code == 429 and "retry-after" in refused.headers
        first.set()
        second.set()
        await until_status(http, running["id"], "completed")
        engine.enqueue(TextDelta("Again."), Finish(FinishReason.STOP), Usage(4, 1))
        assert (await http.post(RESPONSES, json=BACKGROUND)).status_code == 200


async def test_a_restart_marks_unfinished_ones_failed(tmp_path):
    engine = FakeEngine()
    gated(engine)  # never opened: still queued when the "crash" comes
    async with serving(make_app(engine, data_dir=tmp_path)) as host, httpx.AsyncClient(
            base_url=f"http://{host}") as http:
        created = (await http.post(RESPONSES, json=BACKGROUND)).json()
        # A second app over the same data directory is the server after a crash:
        # the first never stored an end for the response.
        after = make_app(FakeEngine(), data_dir=tmp_path)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=after),
                                     base_url="http://t") as restarted:
            failed = (await restarted.get(f"{RESPONSES}/{created['id']}")).json()
            check_response(failed)
            assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
            chained = await restarted.post(RESPONSES, json={
                "model": "fake-model", "input": "Go on.", "previous_response_id": created["id"]})
            assert chained.status_code == 200  # what it had is still a conversation
        await http.post(f"{RESPONSES}/{created['id']}/cancel")  # the "crashed" one's run


async def test_the_drain_ends_running_ones_failed(tmp_path):
    engine = FakeEngine()
    gated(engine)
    app = make_app(engine, data_dir=tmp_path)
    async with serving(app) as host, httpx.AsyncClient(base_url=f"http://{host}") as http:
        created = (await http.post(RESPONSES, json=BACKGROUND)).json()
        app.state.drain.end_grace()  # the server refuses requests now: read its store
        store = ResponseStore(tmp_path / "responses.sqlite3")
        for _ in range(int(WAIT / 0.01)):
            stored = store.get(created["id"])
            if stored is not None and stored.response["status"] == "failed":
                break
            await asyncio.sleep(0.01)
        store.close()
    assert stored.response["error"]["code"] == "server_shutting_down" and not stored.pending


async def test_a_running_response_is_no_previous_response_yet():
    engine = FakeEngine()
    first, second = gated(engine)
    async with serving(make_app(engine)) as host, httpx.AsyncClient(
            base_url=f"http://{host}") as http:
        created = (await http.post(RESPONSES, json=BACKGROUND)).json()
        early = await http.post(RESPONSES, json={"model": "fake-model", "input": "Next",
                                                 "previous_response_id": created["id"]})
        assert early.status_code == 400
        assert early.json()["error"]["code"] == "previous_response_in_progress"
        first.set()
        second.set()
        await until_status(http, created["id"], "completed")


@pytest.mark.parametrize("stream", [False, True])
async def test_background_needs_the_store(stream):
    engine = FakeEngine()
    async with serving(make_app(engine)) as host, httpx.AsyncClient(
            base_url=f"http://{host}") as http:
        refused = await http.post(RESPONSES, json={**BACKGROUND, "store": False,
                                                   "stream": stream})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "background"
