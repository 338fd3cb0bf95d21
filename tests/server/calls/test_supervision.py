"""One supervisor per call (`server/calls/supervision.py`): embeddings and token
counts are stopped like generations (the drain's end, the request deadline) and
answer the reason in their API's envelope; a client that leaves abandons the work;
a stop before the work began stops it at once, one after its end changes nothing."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.requests import ClientDisconnect

from parlance.core.errors import Cancelled, RequestTimeout, ServerShuttingDown
from parlance.engines.fake import FakeEngine
from parlance.server.calls.drain import Drain
from parlance.server.calls.supervision import StopSwitch, Supervisor
from parlance.server.http.access_log import AccessRecord
from tests.support.asgi_exchange import exchange, until
from tests.support.envelopes import checked_error
from tests.support.fake_app import make_app

SHUTTING_DOWN = "server_shutting_down"


class StuckEngine(FakeEngine):
    """Embeds and counts nothing until cancelled (a long batch on a busy machine)."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = 0  # calls under way
        self.cancelled = 0  # calls cancelled

    async def _stuck(self) -> None:
        self.waiting += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def embed(self, request):
        await self._stuck()

    async def count_tokens(self, request):
        await self._stuck()


EMBEDDINGS = [
    ("/v1/embeddings", {"model": "fake-model", "input": "hello"}),
    ("/api/v0/embeddings", {"model": "fake-model", "input": "hello"}),
    ("/api/embed", {"model": "fake-model", "input": "hello"}),
]
COUNTS = [
    ("/v1/messages/count_tokens",
     {"model": "fake-model", "messages": [{"role": "user", "content": "Hello"}]}),
    ("/v1/responses/input_tokens", {"model": "fake-model", "input": "Hello"}),
]


def client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


@pytest.mark.parametrize(("path", "body"), EMBEDDINGS + COUNTS)
async def test_a_call_running_when_the_grace_ends_is_ended_in_its_envelope(path, body):
    engine = StuckEngine()
    app = make_app(engine, shutdown_grace=0.01)
    async with client(app) as http:
        call = asyncio.create_task(http.post(path, json=body))
        await until(lambda: engine.waiting == 1, "the call under way")
        assert app.state.drain.running == 1  # enrolled while it runs
        app.state.drain.begin()
        answer = await asyncio.wait_for(call, 30)
    assert answer.status_code == 503
    error = checked_error(path, answer)
    assert error["message"] == ServerShuttingDown().message
    assert error.get("code", SHUTTING_DOWN) == SHUTTING_DOWN
    assert engine.cancelled == 1 and app.state.drain.running == 0


@pytest.mark.parametrize(("path", "body"), EMBEDDINGS + COUNTS)
async def test_a_call_past_its_deadline_is_ended_in_its_envelope(path, body):
    engine = StuckEngine()
    app = make_app(engine, request_timeout=0.01)
    async with client(app) as http:
        answer = await asyncio.wait_for(http.post(path, json=body), 30)
    assert answer.status_code in (408, 504)  # each API's status for a timeout
    assert checked_error(path, answer)["message"] == RequestTimeout().message
    assert engine.cancelled == 1


@pytest.mark.parametrize(("path", "body"), EMBEDDINGS + COUNTS)
async def test_a_client_that_leaves_abandons_the_call(path, body):
    engine = StuckEngine()
    app = make_app(engine)
    leave = asyncio.Event()
    call = asyncio.create_task(exchange(app, path, body, leave=leave))
    await until(lambda: engine.waiting == 1, "the call under way")
    leave.set()
    answer = await call
    assert answer.status == 499 and engine.cancelled == 1
    assert app.state.drain.running == 0


async def test_a_finished_embedding_leaves_the_drain():
    app = make_app(FakeEngine())
    async with client(app) as http:
        answer = await http.post("/v1/embeddings", json={"model": "fake-model", "input": "a"})
    assert answer.status_code == 200 and app.state.drain.running == 0


def supervisor(drain: Drain | None = None, switch: StopSwitch | None = None,
               timeout: float = 600.0) -> Supervisor:
    deadline = asyncio.get_running_loop().time() + timeout
    return Supervisor(deadline, drain, AccessRecord("req_test"), switch)


async def never() -> None:
    await asyncio.Event().wait()


async def done() -> str:
    return "done"


async def test_a_switch_thrown_before_the_work_began_stops_it_at_once():
    switch = StopSwitch()
    switch.stop(Cancelled())
    with pytest.raises(Cancelled):
        await supervisor(switch=switch).answer(never_left, never())


async def test_a_grace_over_before_the_work_began_stops_it_at_once():
    drain = Drain(0.0)
    drain.end_grace()
    with pytest.raises(ServerShuttingDown):
        await supervisor(drain).answer(never_left, never())
    assert drain.running == 0


async def test_the_deadline_stops_the_work_and_a_late_stop_changes_nothing():
    watched = supervisor(timeout=0.0)
    with pytest.raises(RequestTimeout):
        await watched.answer(never_left, never())
    watched.stop(ServerShuttingDown())
    assert isinstance(watched.reason, RequestTimeout)
    finished = supervisor()
    assert await finished.answer(never_left, done()) == "done"
    finished.stop(ServerShuttingDown())
    assert finished.reason is None


async def test_an_outside_cancellation_stays_one():
    """A cancel that comes from outside (the server cancelling the request's task) is
    not taken for a stop or a client leaving."""
    task = asyncio.create_task(supervisor().answer(never_left, never()))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_stop_the_work_absorbs_leaves_no_cancellation_behind():
    async def stubborn() -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "absorbed"
        return "never"

    assert await supervisor(timeout=0.0).answer(never_left, stubborn()) == "absorbed"
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)  # (a cancellation still pending would be raised here)


async def test_a_client_leaving_is_no_stop():
    gone = asyncio.Event()

    async def receive() -> dict:
        await gone.wait()
        return {"type": "http.disconnect"}

    watched = supervisor()
    task = asyncio.create_task(watched.answer(receive, never()))
    await asyncio.sleep(0)
    gone.set()
    with pytest.raises(ClientDisconnect):
        await task
    assert watched.reason is None


async def never_left() -> dict:
    await asyncio.Event().wait()
    return {"type": "http.disconnect"}
