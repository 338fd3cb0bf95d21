"""Ollama's call without a prompt only loads its model, and its wait is supervised as
any call's: bounded by the request deadline, stopped when the drain's grace ends, given
up when the client leaves, each answered in Ollama's envelope. The load itself runs to
its end and the model stays loaded (another request may be waiting for the same load)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.support.asgi_exchange import exchange
from tests.support.envelopes import checked_error
from tests.support.held_loads import held
from tests.support.scripted_models import COLD

PATHS = pytest.mark.parametrize("path", ["/api/generate", "/api/chat"])


def body(path: str) -> dict[str, object]:
    return {"model": COLD.id} if path == "/api/generate" else {"model": COLD.id, "messages": []}


def refused(path: str, answer, status: int) -> str:
    assert answer.status == status, answer.text
    response = httpx.Response(answer.status, headers=answer.headers, content=answer.text)
    return checked_error(path, response)["message"]


@PATHS
async def test_a_load_past_the_request_deadline_is_a_timeout(path):
    with held(request_timeout=0.05) as app:
        answer = await exchange(app.app, path, body(path))
        assert refused(path, answer, 504)  # Ollama answers a timeout 504
        assert app.app.state.drain.running == 0
        await app.halfway()  # (the load goes on)
        await app.loaded_after_all()


@PATHS
async def test_a_load_under_way_when_the_grace_ends_is_stopped(path):
    with held(shutdown_grace=0.0) as app:
        call = asyncio.create_task(exchange(app.app, path, body(path)))
        await app.halfway()
        assert app.app.state.drain.running == 1  # enrolled while it waits
        app.app.state.drain.begin()
        assert refused(path, await call, 503)
        assert app.app.state.drain.running == 0
        await app.loaded_after_all()


@PATHS
async def test_a_client_that_leaves_stops_waiting_and_the_load_goes_on(path):
    with held() as app:
        leave = asyncio.Event()
        call = asyncio.create_task(exchange(app.app, path, body(path), leave=leave))
        await app.halfway()
        leave.set()
        assert (await call).status == 499
        assert app.app.state.drain.running == 0 and not app.models.is_loaded(COLD.id)
        await app.loaded_after_all()


@PATHS
async def test_a_load_that_finishes_answers_as_ollama_does(path):
    with held() as app:
        call = asyncio.create_task(exchange(app.app, path, body(path)))
        await app.halfway()
        app.loader.gate.set()
        answer = await call
    assert answer.status == 200, answer.text
    assert answer.json()["done"] is True and app.models.is_loaded(COLD.id)
