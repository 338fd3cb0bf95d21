"""WebSocket mode of /v1/responses over a real loopback server and the fake engine:
`response.create` messages in, the SSE stream's events out (no [DONE]), several
responses in turn on one connection, continuation within the connection even with
`store: false`, errors as `error` events, auth on the handshake, and a client that
leaves cancelling its response at once. Every event is checked against the Open
Responses types and the openai SDK's server events (strictly); the SDK's own
`responses.connect()` is a client too."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest
import websockets
from websockets.asyncio.client import connect

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine, Generated
from parlance.server.generation.socket_mode import WAITING_LIMIT
from tests.support.fake_app import make_app
from tests.support.live_server import serving
from tests.support.openresponses import checked_events
from tests.support.responses_socket import TERMINAL, WAIT, checked, receive, response

HELLO = {"type": "response.create", "model": "fake-model", "input": "Hello!"}
def reply(engine: FakeEngine, text: str) -> None:
    engine.enqueue(TextDelta(text), Finish(FinishReason.STOP), Usage(5, 1))


async def test_responses_in_turn_and_continued_on_the_connection():
    engine = FakeEngine()
    for text in ("Hi Ada.", "Your name is Ada.", "Still here."):
        reply(engine, text)
    async with serving(make_app(engine)) as host, connect(f"ws://{host}/v1/responses") as ws:
        first = await response(ws, {**HELLO, "input": "I am Ada.", "store": False})
        assert [e["sequence_number"] for e in first] == list(range(len(first)))
        assert first[0]["type"] == "response.created"
        final = first[-1]["response"]
        assert first[-1]["type"] == "response.completed" and final["store"] is False
        assert final["output"][0]["content"][0]["text"] == "Hi Ada."
        # store: false, yet the connection remembers it
        second = await response(ws, {**HELLO, "input": "My name?", "store": False,
                                     "previous_response_id": final["id"]})
        assert second[-1]["type"] == "response.completed"
        assert [m.content for m in engine.requests[-1].prompts[0].messages] == [
            "I am Ada.", "Hi Ada.", "My name?"]
        # a response stored by an earlier connection continues too
        async with httpx.AsyncClient(base_url=f"http://{host}") as http:
            stored = (await http.post("/v1/responses", json={
                "model": "fake-model", "input": "Stored."})).json()
        third = await response(ws, {**HELLO, "input": "Go on.",
                                    "previous_response_id": stored["id"]})
        assert third[-1]["type"] == "response.completed"
        assert engine.requests[-1].prompts[0].messages[0].content == "Stored."
    async with serving(make_app(engine)) as host, connect(f"ws://{host}/v1/responses") as ws:
        # a new connection: the unstored response is gone
        [error] = await response(ws, {**HELLO, "previous_response_id": final["id"]})
        assert error["status"] == 400
        assert error["error"]["code"] == "previous_response_not_found"
        assert error["error"]["param"] == "previous_response_id"


async def test_the_same_events_as_the_sse_stream():
    script = [Generated("<think>Greet.</think>Hel"), Generated("lo!"),
              Finish(FinishReason.STOP), Usage(5, 4, reasoning_tokens=2)]
    engine = FakeEngine()
    engine.enqueue(*script)
    engine.enqueue(*script)
    app = make_app(engine)
    async with serving(app) as host:
        async with connect(f"ws://{host}/v1/responses") as ws:
            over_socket = await response(ws, HELLO)
        async with httpx.AsyncClient(base_url=f"http://{host}") as http:
            sse = await http.post("/v1/responses", json={**HELLO, "stream": True})
    over_sse = [data for _, data in checked_events(sse.text)]
    assert over_sse[-1] == "[DONE]"

    def shape(events: list[Any]) -> list[Any]:
        return [(e["type"], e.get("delta"), e["sequence_number"]) for e in events]

    assert shape(over_socket) == shape(over_sse[:-1])


@pytest.mark.parametrize(("message", "status", "param"), [
    ("not json", 400, None),
    ({"type": "session.update"}, 400, "type"),
    ({**HELLO, "background": True}, 400, "background"),
    ({**HELLO, "temperature": 5}, 400, "temperature"),
    ({**HELLO, "input": [{"type": "compaction", "encrypted_content": "forged"}]}, 400,
     "input[0].encrypted_content"),
    ({**HELLO, "model": "no-such-model"}, 404, "model"),
])
async def test_refusals_are_error_events_and_the_connection_goes_on(message, status, param):
    engine = FakeEngine()
    reply(engine, "Fine.")
    async with serving(make_app(engine)) as host, connect(f"ws://{host}/v1/responses") as ws:
        await ws.send(message if isinstance(message, str) else json.dumps(message))
        error = await receive(ws)
        assert error["type"] == "error" and error["status"] == status
        assert error["error"]["param"] == param and error["error"]["message"]
        # an acknowledgement needs no answer: the next event is the next response's
        await ws.send(json.dumps({"type": "response.processed", "response_id": "resp_1"}))
        events = await response(ws, HELLO)
        assert events[-1]["type"] == "response.completed"


async def test_lanes_are_echoed_and_generate_false_only_records():
    engine = FakeEngine()
    reply(engine, "Noted.")
    async with serving(make_app(engine)) as host, connect(f"ws://{host}/v1/responses") as ws:
        warm = await response(ws, {**HELLO, "input": "Context.", "generate": False,
                                   "store": False, "stream_id": "lane-1"})
        assert {e.get("stream_id") for e in warm} == {"lane-1"}
        assert warm[-1]["type"] == "response.completed"
        assert warm[-1]["response"]["output"] == [] and not engine.requests  # no model run
        turn = await response(ws, {**HELLO, "input": "Now.", "store": False,
                                   "previous_response_id": warm[-1]["response"]["id"]})
        assert "stream_id" not in turn[0]
    assert [m.content for m in engine.requests[-1].prompts[0].messages] == ["Context.", "Now."]


async def test_messages_wait_their_turn_within_a_bound():
    engine = FakeEngine()
    gate = asyncio.Event()
    engine.enqueue(gate, TextDelta("First."), Finish(FinishReason.STOP), Usage(5, 1))
    async with serving(make_app(engine)) as host, connect(f"ws://{host}/v1/responses") as ws:
        await ws.send(json.dumps(HELLO))
        assert (await receive(ws))["type"] == "response.created"
        for _ in range(WAITING_LIMIT):  # each waits for the one before it
            await ws.send(json.dumps({**HELLO, "max_output_tokens": 1}))
        await ws.send(json.dumps(HELLO))  # one too many
        events = [await receive(ws)]
        while events[-1]["type"] != "error":
            events.append(await receive(ws))
        assert events[-1]["status"] == 429
        gate.set()
        done = 0
        while done < 1 + WAITING_LIMIT:  # then every one that waited is answered in turn
            done += (await receive(ws))["type"] in TERMINAL


async def test_a_response_create_waits_for_nothing_an_http_request_would_not():
    """Only a call on its own connection comes before a `response.create`: one held on
    another connection, or an HTTP stream held mid-answer, does not delay it."""
    engine = FakeEngine()
    held = asyncio.Event()
    for text in ("HTTP.", "Other socket."):
        engine.enqueue(TextDelta("Once"), held, TextDelta(text), Finish(FinishReason.STOP),
                       Usage(5, 2))
    reply(engine, "Not queued.")
    async with serving(make_app(engine)) as host, httpx.AsyncClient(
            base_url=f"http://{host}", timeout=WAIT) as http, http.stream(
            "POST", "/v1/responses", json={**HELLO, "stream": True}) as sse:
        lines = sse.aiter_lines()
        while "output_text.delta" not in await anext(lines):
            pass
        async with connect(f"ws://{host}/v1/responses") as other, \
                connect(f"ws://{host}/v1/responses") as ws:
            await other.send(json.dumps(HELLO))
            while (await receive(other))["type"] != "response.output_text.delta":
                pass
            turn = await response(ws, HELLO)
            assert turn[-1]["type"] == "response.completed"
            assert turn[-1]["response"]["output"][0]["content"][0]["text"] == "Not queued."
            held.set()
            assert (await response_end(other))["type"] == "response.completed"
        async for _ in lines:
            pass


async def response_end(ws) -> dict[str, Any]:
    """The rest of a response already under way: its terminal event."""
    event = await receive(ws)
    while event["type"] not in TERMINAL:
        event = await receive(ws)
    return event


async def test_a_long_prompt_shows_progress_until_the_output_begins():
    """While the engine is silent, `response.in_progress` again every keepalive
    interval (a client's idle timer sees no WebSocket ping); none once output began."""
    engine = FakeEngine()
    engine.enqueue(0.5, TextDelta("Hel"), 0.5, TextDelta("lo"), Finish(FinishReason.STOP),
                   Usage(5, 2))
    app = make_app(engine, keepalive_seconds=0.05)
    async with serving(app) as host, connect(f"ws://{host}/v1/responses") as ws:
        events = await response(ws, HELLO)
    kinds = [e["type"] for e in events]
    output = kinds.index("response.output_item.added")
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[2:output] == ["response.in_progress"] * (output - 2) and output > 2
    assert "response.in_progress" not in kinds[output:]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Hello"


async def test_api_key_on_the_handshake():
    engine = FakeEngine()
    reply(engine, "Hi.")
    async with serving(make_app(engine, api_keys=("sk-1",))) as host:
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with connect(f"ws://{host}/v1/responses"):
                pass
        assert refused.value.response.status_code == 401
        assert json.loads(refused.value.response.body)["error"]["code"] == "missing_api_key"
        async with connect(f"ws://{host}/v1/responses",
                           additional_headers={"Authorization": "Bearer sk-1"}) as ws:
            assert (await response(ws, HELLO))[-1]["type"] == "response.completed"


async def test_a_draining_server_refuses_the_handshake_with_503():
    app = make_app(FakeEngine())
    async with serving(app) as host:
        app.state.drain.begin()
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with connect(f"ws://{host}/v1/responses"):
                pass
    assert refused.value.response.status_code == 503
    assert json.loads(refused.value.response.body)["error"]["code"] == "server_shutting_down"


async def test_a_client_that_leaves_cancels_its_response_at_once():
    engine = FakeEngine()
    gate = asyncio.Event()  # never opened: the response would wait forever
    engine.enqueue(TextDelta("Once"), gate, TextDelta(" upon"), Finish(FinishReason.STOP))
    app = make_app(engine)
    async with serving(app) as host:
        async with connect(f"ws://{host}/v1/responses") as ws:
            await ws.send(json.dumps(HELLO))
            response_id = (await receive(ws))["response"]["id"]
            while (await receive(ws))["type"] != "response.output_text.delta":
                pass
        generation = engine.generations[-1]
        for _ in range(int(WAIT / 0.01)):  # the server sees the close, then cancels
            if generation.cancelled:
                break
            await asyncio.sleep(0.01)
        assert generation.cancelled
        async with httpx.AsyncClient(base_url=f"http://{host}") as http:
            stored = (await http.get(f"/v1/responses/{response_id}")).json()
    assert stored["status"] == "cancelled"
    assert stored["output"][0]["content"][0]["text"] == "Once"


async def test_openai_sdk_connect():
    engine = FakeEngine()
    reply(engine, "One.")
    reply(engine, "Two.")
    async with serving(make_app(engine)) as host, openai.AsyncOpenAI(
            base_url=f"http://{host}/v1", api_key="k",
            _strict_response_validation=True) as client, client.responses.connect() as connection:
        texts, previous = [], None
        for question in ("First?", "Second?"):
            await connection.response.create(model="fake-model", input=question,
                                             store=False, previous_response_id=previous)
            while True:
                raw = await asyncio.wait_for(connection.recv_bytes(), WAIT)
                checked(json.loads(raw))
                event = connection.parse_event(raw)
                if event.type == "response.output_text.delta":
                    texts.append(event.delta)
                if event.type == "response.completed":
                    previous = event.response.id
                    break
    assert texts == ["One.", "Two."]
    assert [m.content for m in engine.requests[-1].prompts[0].messages] == [
        "First?", "One.", "Second?"]


async def test_each_response_create_gets_an_access_line(caplog):
    engine = FakeEngine()
    reply(engine, "Fine.")
    caplog.set_level("INFO", logger="parlance.access")
    async with serving(make_app(engine)) as host, connect(f"ws://{host}/v1/responses") as ws:
        assert (await response(ws, HELLO))[-1]["type"] == "response.completed"
        assert (await response(ws, {**HELLO, "temperature": 5}))[-1]["type"] == "error"
        await ws.send(json.dumps({"type": "response.processed", "response_id": "resp_1"}))
    lines = [r.getMessage() for r in caplog.records if r.name == "parlance.access"]
    sockets = [line for line in lines if "method=WS" in line]
    assert len(sockets) == 2, lines  # no line for the acknowledgement
    served, refused = sockets
    assert "path=/v1/responses status=200 model=fake-model" in served
    assert "prompt_tokens=5 completion_tokens=1" in served
    assert "status=400" in refused


async def test_a_refused_continuation_evicts_what_it_continued():
    """An output for a call no earlier call made is a 400 (as on OpenAI), and the
    refused continuation's previous response leaves the connection: a store: false one
    cannot be continued any more; a stored one still can, from the store."""
    engine = FakeEngine()
    for text in ("OK.", "Stored.", "Again."):
        reply(engine, text)
    orphan = [{"type": "function_call_output", "call_id": "call_missing", "output": "42"}]
    async with serving(make_app(engine)) as host, connect(f"ws://{host}/v1/responses") as ws:
        first = (await response(ws, {**HELLO, "store": False}))[-1]["response"]
        [refused] = await response(ws, {**HELLO, "store": False, "input": orphan,
                                        "previous_response_id": first["id"]})
        assert (refused["status"], refused["error"]["param"]) == (400, "input")
        assert refused["error"]["message"] == (
            "No tool call found for function call output with call_id call_missing.")
        [gone] = await response(ws, {**HELLO, "store": False,
                                     "previous_response_id": first["id"]})
        assert gone["error"]["code"] == "previous_response_not_found"
        stored = (await response(ws, HELLO))[-1]["response"]
        await response(ws, {**HELLO, "input": orphan, "previous_response_id": stored["id"]})
        again = await response(ws, {**HELLO, "previous_response_id": stored["id"]})
        assert again[-1]["type"] == "response.completed"


async def test_auto_tool_choice_with_no_tools_is_answered():
    """Codex's compaction turn in WebSocket mode: `tools: []`, `tool_choice: "auto"`."""
    engine = FakeEngine()
    reply(engine, "Summary.")
    async with serving(make_app(engine)) as host, connect(f"ws://{host}/v1/responses") as ws:
        events = await response(ws, {**HELLO, "tools": [], "tool_choice": "auto"})
        assert events[-1]["type"] == "response.completed", events[-1]
