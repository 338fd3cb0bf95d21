"""The Parlance headers on any route: `X-Parlance-Speculative: off` opts one request out
of speculative decoding; a value of it or of `X-Parlance-Progress` that is neither on
nor off is a 400 in the route's own envelope (what progress shows is the Responses
dialect's: `tests/dialects/openai/responses/test_progress.py`)."""

from __future__ import annotations

import httpx
import pytest

from parlance.engines.fake import FakeEngine
from tests.support.envelopes import checked_error
from tests.support.fake_app import make_app

BODIES = {
    "/v1/chat/completions": {"model": "fake-model",
                             "messages": [{"role": "user", "content": "Hi"}]},
    "/v1/messages": {"model": "fake-model", "max_tokens": 8,
                     "messages": [{"role": "user", "content": "Hi"}]},
    "/api/generate": {"model": "fake-model", "prompt": "Hi", "stream": False},
}


async def post(engine: FakeEngine, path: str, headers: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=make_app(engine), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test",
                                 timeout=60) as client:
        return await client.post(path, json=BODIES[path], headers=headers)


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize(("header", "speculative"),
                         [(None, True), ("off", False), ("OFF", False), ("on", True)])
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
    assert header in checked_error(path, response)["message"]
    assert engine.requests == []


@pytest.mark.parametrize("path", list(BODIES))
async def test_progress_is_accepted_on_every_route(path):
    engine = FakeEngine()
    response = await post(engine, path, {"X-Parlance-Progress": "on"})
    assert response.status_code == 200, response.text
