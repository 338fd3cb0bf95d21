"""The Parlance headers on every generation route: `X-Parlance-Speculative: off` opts one
request out of speculative decoding; a value of it or of `X-Parlance-Progress` other
than on or off (in any case), other spellings of a switch too, is a 400 in the route's
own envelope, over HTTP and in a WebSocket handshake (what progress shows is the
Responses dialect's: `tests/dialects/openai/responses/test_progress.py`)."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.asyncio.client import connect

from parlance.engines.fake import FakeEngine
from tests.support.envelopes import checked_error
from tests.support.fake_app import make_app
from tests.support.live_server import serving

HI = [{"role": "user", "content": "Hi"}]
BODIES = {  # one path of each generation dialect
    "/v1/chat/completions": {"model": "fake-model", "messages": HI},
    "/v1/completions": {"model": "fake-model", "prompt": "Hi"},
    "/v1/responses": {"model": "fake-model", "input": "Hi"},
    "/v1/responses/compact": {"model": "fake-model", "input": "Hi"},
    "/v1/messages": {"model": "fake-model", "max_tokens": 8, "messages": HI},
    "/api/v1/chat": {"model": "fake-model", "input": "Hi"},
    "/api/chat": {"model": "fake-model", "messages": HI, "stream": False},
    "/api/generate": {"model": "fake-model", "prompt": "Hi", "stream": False},
}
# Spellings of a switch that are not its own (`on`, `off`), and values of neither
REFUSED = ["1", "0", "yes", "no", "true", "false", "auto", "eagle", ""]


async def post(engine: FakeEngine, path: str, headers: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=make_app(engine), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test",
                                 timeout=60) as client:
        return await client.post(path, json=BODIES[path], headers=headers)


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize(("header", "speculative"),
                         [(None, True), ("off", False), ("OFF", False), ("on", True),
                          ("On", True)])
async def test_the_header_sets_the_requests_speculation(path, header, speculative):
    engine = FakeEngine()
    response = await post(engine, path, {"X-Parlance-Speculative": header} if header else {})
    assert response.status_code == 200, response.text
    assert engine.requests[0].speculative is speculative


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize("header", ["X-Parlance-Speculative", "X-Parlance-Progress"])
async def test_an_unknown_value_is_refused_in_the_routes_envelope(path, header):
    engine = FakeEngine()
    response = await post(engine, path, {header: "eagle"})
    assert response.status_code == 400
    error = checked_error(path, response)
    assert header in error["message"] and "'on' or 'off'" in error["message"]
    assert error.get("param", header) == header  # (Ollama's envelope has no param)
    assert engine.requests == []


@pytest.mark.parametrize("value", REFUSED)
@pytest.mark.parametrize("header", ["X-Parlance-Speculative", "X-Parlance-Progress"])
async def test_a_switch_has_one_spelling(header, value):
    engine = FakeEngine()
    response = await post(engine, "/v1/chat/completions", {header: value})
    assert response.status_code == 400, value
    assert checked_error("/v1/chat/completions", response)["param"] == header
    assert engine.requests == []


async def test_a_bad_value_in_a_websocket_handshake_refuses_each_call():
    engine = FakeEngine()
    message = {"type": "response.create", "model": "fake-model", "input": "Hi"}
    async with serving(make_app(engine)) as host, connect(
            f"ws://{host}/v1/responses",
            additional_headers={"X-Parlance-Speculative": "yes"}) as socket:
        for _ in range(2):
            await socket.send(json.dumps(message))
            event = json.loads(await socket.recv())
            assert event["type"] == "error" and event["status"] == 400, event
            assert event["error"]["param"] == "X-Parlance-Speculative", event
    assert engine.requests == []


@pytest.mark.parametrize("path", list(BODIES))
async def test_progress_is_accepted_on_every_route(path):
    engine = FakeEngine()
    response = await post(engine, path, {"X-Parlance-Progress": "on"})
    assert response.status_code == 200, response.text
