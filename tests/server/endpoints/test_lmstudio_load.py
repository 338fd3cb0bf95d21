"""`POST /api/v1/models/load` is supervised as every call: answered at once or as a
stream, its wait is bounded by the request deadline and stopped when the drain's grace
ends (LM Studio's envelope; in a stream, its `error` event after `model_load.start`),
a load that ends within the grace answers as usual, and a client that leaves stops
waiting. The load itself always runs to its end and its model stays loaded. The loader
holds half way until the test opens its gate, so every stop lands mid-load."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.support.asgi_exchange import Exchange, exchange
from tests.support.envelopes import checked_error
from tests.support.held_loads import held
from tests.support.lmstudio_contract import check_load_answer, checked_load_events
from tests.support.scripted_models import COLD

LOAD = "/api/v1/models/load"
BODY = {"model": COLD.id}
STREAMED = ((b"accept", b"text/event-stream"),)
SHUTTING_DOWN, TIMED_OUT = "server_shutting_down", "request_timeout"


def stopped_with(answer: Exchange, code: str, *, streamed: bool) -> None:
    """The load's answer is LM Studio's error with `code`: the `error` event that ends
    its stream, or an error response."""
    if streamed:
        assert answer.status == 200 and answer.ended
        events = checked_load_events(answer.text)
        name, data = events[-1]
        assert name == "error" and data["error"]["code"] == code, events
        assert data["error"]["type"] == "unknown"
        return
    assert answer.status == (503 if code == SHUTTING_DOWN else 408)
    response = httpx.Response(answer.status, headers=answer.headers, content=answer.text)
    error = checked_error(LOAD, response)
    assert error["code"] == code and error["type"] == "unknown"


HOW = pytest.mark.parametrize("headers", [STREAMED, ()], ids=["streamed", "answered"])


@HOW
async def test_a_load_under_way_when_the_grace_ends_is_stopped_in_lmstudios_shape(headers):
    with held(shutdown_grace=0.0) as app:
        call = asyncio.create_task(exchange(app.app, LOAD, BODY, headers=headers))
        await app.halfway()
        assert app.app.state.drain.running == 1  # enrolled while it waits
        app.app.state.drain.begin()
        stopped_with(await call, SHUTTING_DOWN, streamed=bool(headers))
        assert app.app.state.drain.running == 0
        await app.loaded_after_all()


@HOW
async def test_a_load_that_ends_within_the_grace_answers_as_usual(headers):
    with held(shutdown_grace=600.0) as app:
        call = asyncio.create_task(exchange(app.app, LOAD, BODY, headers=headers))
        await app.halfway()
        app.app.state.drain.begin()
        app.loader.gate.set()
        answer = await call
    assert answer.status == 200
    if headers:
        assert checked_load_events(answer.text)[-1][0] == "model_load.end"
    else:
        check_load_answer(answer.json())
    assert app.models.is_loaded(COLD.id) and app.app.state.drain.running == 0


@HOW
async def test_a_load_past_the_request_deadline_is_a_timeout(headers):
    with held(request_timeout=0.05) as app:
        answer = await exchange(app.app, LOAD, BODY, headers=headers)
        stopped_with(answer, TIMED_OUT, streamed=bool(headers))
        assert app.app.state.drain.running == 0
        await app.halfway()  # (the load goes on)
        await app.loaded_after_all()


@HOW
async def test_a_client_that_leaves_stops_waiting_and_the_load_goes_on(headers):
    with held() as app:
        leave = asyncio.Event()
        call = asyncio.create_task(exchange(app.app, LOAD, BODY, headers=headers,
                                            leave=leave))
        await app.halfway()
        leave.set()
        answer = await call
        if not headers:
            assert answer.status == 499
        assert app.app.state.drain.running == 0 and not app.models.is_loaded(COLD.id)
        await app.loaded_after_all()
