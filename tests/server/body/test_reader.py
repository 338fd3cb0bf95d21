"""The shared body reader: what Python's json would let through is refused with a 400
naming the parameter (never a 500, never a 200 stream that dies), bodies over the limit
get a 413 before they are read whole, large bodies are decoded off the event loop, and
errors nobody caught are answered in the envelope of the path's API."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
from collections.abc import AsyncIterator

import httpx
import pytest

from parlance.engines.fake import FakeEngine
from parlance.server.body import strict_json
from tests.support.envelopes import checked_error
from tests.support.fake_app import make_app

CHAT = "/v1/chat/completions"


def chat(extra: str) -> str:
    """A chat body that is fine but for `extra` (raw JSON text: `"key": value`)."""
    return '{"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}], ' + extra + "}"


def client_for(app) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60)


async def post_raw(path: str, text: str, **settings: object) -> httpx.Response:
    async with client_for(make_app(FakeEngine(), **settings)) as client:
        return await client.post(path, content=text.encode("utf-8", "surrogatepass"),
                                 headers={"content-type": "application/json"})


REFUSED = [
    (CHAT, chat('"seed": ' + "1" * 5000), "seed"),
    (CHAT, chat('"repeat_penalty": Infinity'), "repeat_penalty"),
    (CHAT, chat('"temperature": NaN'), "temperature"),
    (CHAT, chat('"top_p": -Infinity'), "top_p"),
    (CHAT, chat('"min_p": 1e999'), "min_p"),
    (CHAT, chat('"logit_bias": {"x": 1}'), "logit_bias"),
    (CHAT, '{"model": "fake-model", "messages": [{"role": "user", "content": "\\ud800"}]}',
     "messages[0].content"),
    (CHAT, chat('"stop": ["ok", "x\\udfff"]'), "stop[1]"),
    ("/v1/completions", '{"model": "fake-model", "prompt": "a\\ud800b"}', "prompt"),
    ("/v1/completions", '{"model": "fake-model", "prompt": "a\\uDBFFb"}', "prompt"),
    ("/v1/completions", '{"model": "fake-model", "prompt": "ok", "user": "\\uDc00"}', "user"),
    ("/v1/responses", '{"model": "fake-model", "input": "Hi", "stream": true, '
     '"instructions": "\\udc00"}', "instructions"),
    ("/v1/responses", '{"model": "fake-model", "input": "\\ud800"}', "input"),
    ("/v1/responses", '{"model": "fake-model", "input": "Hi", "metadata": {"a": "\\ud800"}}',
     "metadata.a"),
    ("/v1/responses/input_tokens", '{"model": "fake-model", "input": "\\ud800"}', "input"),
    ("/api/v1/chat", '{"model": "fake-model", "input": "Hi", "system_prompt": "\\ud800"}',
     "system_prompt"),
    ("/api/v1/chat", '{"model": "\\ud800", "input": "Hi", "stream": true}', "model"),
    ("/api/v1/chat", '{"model": "fake-model", "input": "Hi", "seed": ' + "7" * 5000 + "}",
     "seed"),
    ("/api/v1/models/load", '{"model": "fake-model", "context_length": Infinity}',
     "context_length"),
    ("/api/v1/models/download", '{"model": "\\ud800"}', "model"),
    (CHAT, '{"model": "fake-model", "messages": ' + "[" * 100 + "]" * 100 + "}",
     "messages" + "[0]" * 63),
    (CHAT, '{"model": "fake-model", "messages": ' + "[" * 64 + "]" * 64 + "}",
     "messages" + "[0]" * 63),
]


@pytest.mark.parametrize(("path", "body", "param"), REFUSED)
async def test_refused_with_a_400_naming_the_parameter(path, body, param):
    response = await post_raw(path, body)
    assert response.status_code == 400, response.text
    error = checked_error(path, response)
    assert error["param"] == param
    assert param.split("[")[0].split(".")[0] in error["message"]


@pytest.mark.parametrize("path", [CHAT, "/api/v1/chat", "/v1/responses"])
@pytest.mark.parametrize("body", [
    "[" * 10_000 + "]" * 10_000,  # beyond the recursion limit of Python's json
    "not json",
    '{"model": "fake-model", "input": "Hi"',
])
async def test_unreadable_bodies_are_a_400_in_the_routes_envelope(path, body):
    response = await post_raw(path, body)
    assert response.status_code == 400, response.text
    assert checked_error(path, response)["code"] == "invalid_json"


async def test_invalid_utf8_is_a_400():
    async with client_for(make_app(FakeEngine())) as client:
        response = await client.post(CHAT, content=b'{"model": "fake-model", "x": "\xed\xa0\x80"}')
    assert response.status_code == 400
    assert "UTF-8" in checked_error(CHAT, response)["message"]


async def test_a_surrogate_pair_is_a_character_not_a_refusal():
    engine = FakeEngine()
    async with client_for(make_app(engine)) as client:
        response = await client.post(CHAT, content=b'{"model": "fake-model", "messages": '
                                     b'[{"role": "user", "content": "\\ud83d\\udc31"}]}')
    assert response.status_code == 200, response.text
    assert engine.requests[0].prompts[0].messages[0].content == "🐱"


@pytest.mark.parametrize("path", [CHAT, "/api/v1/chat"])
async def test_a_body_of_too_many_objects_is_refused(monkeypatch, path):
    monkeypatch.setattr(strict_json, "MAX_OBJECTS", 10)
    messages = [{"role": "user", "content": "Hi"}]
    fits = {"model": "fake-model", "messages": messages * 9, "input": "Hi"}
    assert (await post_raw(path, json.dumps(fits))).status_code == 200
    response = await post_raw(path, json.dumps({**fits, "messages": messages * 10}))
    assert response.status_code == 400
    assert checked_error(path, response)["code"] == "too_many_objects"


# -- the size limit -------------------------------------------------------------------

LIMIT = 4096


class Chunks:
    """A request body sent in chunks, counting how many the server pulled."""

    def __init__(self, count: int, size: int = 512) -> None:
        self.count, self.size, self.pulled = count, size, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.count):
            self.pulled += 1
            yield b" " * self.size


@pytest.mark.parametrize("path", [CHAT, "/v1/responses/input_tokens", "/api/v1/chat",
                                  "/api/v1/models/load"])
async def test_a_declared_length_over_the_limit_is_refused_before_reading(path):
    body = Chunks(16)  # 8 KiB
    async with client_for(make_app(FakeEngine(), max_body_bytes=LIMIT)) as client:
        response = await client.post(path, content=body,
                                     headers={"content-length": str(body.count * body.size)})
    assert response.status_code == 413
    assert checked_error(path, response)["code"] == "payload_too_large"
    assert body.pulled == 0


@pytest.mark.parametrize("path", [CHAT, "/api/v1/chat"])
async def test_a_chunked_body_is_refused_once_it_passes_the_limit(path):
    body = Chunks(1000)  # 500 KiB, no Content-Length
    async with client_for(make_app(FakeEngine(), max_body_bytes=LIMIT)) as client:
        response = await client.post(path, content=body)
    assert response.status_code == 413
    checked_error(path, response)
    assert body.pulled == LIMIT // body.size + 1


async def test_a_body_at_the_limit_is_accepted():
    prefix = '{"model": "fake-model", "messages": [{"role": "user", "content": "'
    suffix = '"}]}'
    body = prefix + "x" * (LIMIT - len(prefix) - len(suffix)) + suffix
    assert len(body) == LIMIT
    assert (await post_raw(CHAT, body, max_body_bytes=LIMIT)).status_code == 200


# -- off the event loop ---------------------------------------------------------------


async def test_a_large_body_is_decoded_while_the_loop_answers_others(monkeypatch):
    """The decoding waits for a /health request scheduled from inside it: it completes
    only if the loop is free, i.e. the decoding runs on another thread."""
    loop = asyncio.get_running_loop()
    answered = threading.Event()
    health: list[int] = []
    waited: list[bool] = []
    decode = strict_json.decode

    async def ask_health(client: httpx.AsyncClient) -> None:
        health.append((await client.get("/health")).status_code)
        answered.set()

    def slow_decode(raw: bytes):
        loop.call_soon_threadsafe(lambda: loop.create_task(ask_health(client)))
        waited.append(answered.wait(timeout=60))
        return decode(raw)

    monkeypatch.setattr(strict_json, "decode", slow_decode)
    big = {"model": "fake-model", "messages": [{"role": "user", "content": "x" * 200_000}]}
    async with client_for(make_app(FakeEngine())) as client:
        response = await client.post(CHAT, content=json.dumps(big).encode())
    assert response.status_code == 200
    assert waited == [True] and health == [200]


@pytest.mark.parametrize(("size", "paused"), [(1_000, False), (200_000, True)])
async def test_a_large_body_is_parsed_with_the_collector_paused(monkeypatch, size, paused):
    seen: list[bool] = []
    decode = strict_json.decode

    def observed(raw: bytes):
        seen.append(gc.isenabled())
        return decode(raw)

    monkeypatch.setattr(strict_json, "decode", observed)
    gc.enable()
    big = {"model": "fake-model", "messages": [{"role": "user", "content": "x" * size}]}
    async with client_for(make_app(FakeEngine())) as client:
        assert (await client.post(CHAT, json=big)).status_code == 200
    assert seen == [not paused]
    assert gc.isenabled()


# -- errors no endpoint caught ----------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/api/v1/nothing", 404), ("GET", "/api/v1/chat", 405),
    ("GET", "/v1/nothing", 404), ("GET", "/v1/chat/completions", 405),
])
async def test_unknown_routes_in_the_envelope_of_their_api(method, path, status):
    async with client_for(make_app(FakeEngine())) as client:
        response = await client.request(method, path)
    assert response.status_code == status
    checked_error(path, response)


@pytest.mark.parametrize(("path", "body"), [
    ("/api/v1/chat", {"model": "fake-model", "input": "Hi"}),
    (CHAT, {"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}]}),
])
async def test_an_unexpected_exception_in_the_envelope_of_its_api(path, body):
    engine = FakeEngine()

    async def broken(request):
        raise RuntimeError("a bug")

    engine.start = broken  # type: ignore[method-assign]
    async with client_for(make_app(engine)) as client:
        response = await client.post(path, json=body)
    assert response.status_code == 500
    assert checked_error(path, response)["message"] == (
        "The server had an error while processing your request.")
