"""The model lease every call takes (`models/lease.py`): refuse first, acquire (loading
just in time), the call's keep_alive, and one release when the call ends; over the
server, a token count and a refused generation hold and release their model as a
generation that runs does."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from parlance.core.errors import InvalidRequest, ModelNotFound
from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine
from parlance.models.lease import ModelLease
from parlance.models.served import LoadOptions, ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.asgi_exchange import Exchange, exchange
from tests.support.fake_app import FAKE_SPEC
from tests.support.scripted_models import COLD, ScriptedLoader, unloaded

HELLO = [{"role": "user", "content": "Hello there, model!"}]
PATIENCE = 60.0  # a generous bound for every wait; nothing is timed against it


class RecordingModels(ServedModels):
    """CallFacts models that note every call's `keep` and `release` (and do them)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.kept: list[tuple[str, float | None]] = []
        self.released: list[str] = []

    def keep(self, model: ServedModel, seconds: float | None) -> None:
        self.kept.append((model.spec.id, seconds))
        super().keep(model, seconds)

    def release(self, model: ServedModel) -> None:
        self.released.append(model.spec.id)
        super().release(model)


def served(engine: FakeEngine | None = None, **kwargs) -> RecordingModels:
    return RecordingModels([ServedModel(FAKE_SPEC, engine or FakeEngine(), 1700000000)],
                           **kwargs)


async def test_a_lease_keeps_the_calls_keep_alive_and_releases_once():
    models = served()
    async with ModelLease(models, "fake-alias", keep_alive=30.0) as lease:
        assert lease.model.spec.id == "fake-model" and lease.name == "fake-alias"
        assert lease.model.keep_alive == 30.0 and lease.load_seconds is None
        assert models.released == [] and lease.model.calls == 1
    assert models.kept == [("fake-model", 30.0)] and models.released == ["fake-model"]
    lease.release()  # a stream's end may come after the handler let go: nothing more
    assert models.released == ["fake-model"] and lease.model.calls == 0


async def test_a_lease_loads_a_cold_model_and_reports_the_wait():
    models = served(catalog=lambda: [COLD], loader=ScriptedLoader())
    async with ModelLease(models, COLD.id, LoadOptions(context_length=1024)) as lease:
        assert lease.load_seconds is not None and lease.load_seconds > 0
        assert lease.model.engine.context_length == 1024
    assert models.released == [COLD.id]
    await models.aclose()


async def test_a_lease_refuses_before_it_acquires():
    models = served(catalog=lambda: [COLD], loader=ScriptedLoader())
    with pytest.raises(InvalidRequest) as refused:
        ModelLease(models, "fake-model", LoadOptions(context_length=-5)).check()
    assert refused.value.param == "context_length"
    with pytest.raises(ModelNotFound):
        ModelLease(models, "no-such-model").check(loading_later=True)
    ModelLease(models, "no-such-model").check()  # acquire will say it
    with pytest.raises(ModelNotFound):
        async with ModelLease(models, "no-such-model"):
            pass
    assert not models.is_loaded(COLD.id) and models.kept == [] and models.released == []


async def test_a_lease_never_acquired_releases_nothing():
    models = served()
    lease = ModelLease(models, "fake-model")
    lease.release()
    assert models.released == []
    with pytest.raises(RuntimeError):
        lease.model  # noqa: B018


async def over_http(models: ServedModels, path: str, body: dict) -> httpx.Response:
    app = create_app(models, ServerSettings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        return await client.post(path, json=body)


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/messages/count_tokens", {"model": "fake-model", "messages": HELLO}),
    ("/v1/responses/input_tokens", {"model": "fake-model", "input": "Hello there, model!"}),
])
async def test_a_token_count_holds_and_releases_its_model_like_a_generation(path, body):
    counted, generated = served(), served()
    count = await over_http(counted, path, body)
    chat = await over_http(generated, "/v1/chat/completions",
                           {"model": "fake-model", "messages": HELLO})
    assert count.status_code == 200 and chat.status_code == 200
    assert count.json()["input_tokens"] == 3  # the fake engine's tokens are words
    assert counted.kept == generated.kept == [("fake-model", None)]
    assert counted.released == generated.released == ["fake-model"]


async def test_a_token_count_loads_a_cold_model_with_the_idle_ttl():
    models = served(catalog=lambda: [COLD], loader=ScriptedLoader(), idle_ttl=3600)
    count = await over_http(models, "/v1/messages/count_tokens",
                            {"model": COLD.id, "messages": HELLO})
    assert count.status_code == 200
    model = models.resolve(COLD.id)[0]
    assert model.jit and models.ttl(model) == 3600  # unloaded once idle that long
    assert models.released == [COLD.id]
    await models.aclose()


async def test_a_generation_refused_at_start_releases_its_model():
    models = served(FakeEngine(context_length=16))
    too_long = [{"role": "user", "content": "word " * 64}]
    answer = await over_http(models, "/v1/chat/completions",
                             {"model": "fake-model", "messages": too_long})
    assert answer.status_code == 403  # OpenAI's status for a prompt over the context
    assert answer.json()["error"]["code"] == "context_length_exceeded"
    assert models.kept == [("fake-model", None)] and models.released == ["fake-model"]


async def test_an_ollama_load_only_call_keeps_and_releases_its_model():
    models = served()
    answer = await over_http(models, "/api/generate",
                             {"model": "fake-model", "keep_alive": "5m"})
    assert answer.status_code == 200 and answer.json()["done_reason"] == "load"
    assert models.kept == [("fake-model", 300.0)] and models.released == ["fake-model"]


async def test_keep_alive_0_unloads_the_model_after_a_stream_never_during_it():
    """Ollama's keep_alive 0: unloaded once the request is done. The lease holds the
    model while the stream waits mid-way (an engine with nothing running in it, as
    the scripted one always is), whatever the reaper finds."""
    engine = FakeEngine()
    gate = asyncio.Event()
    engine.enqueue(TextDelta("Half"), gate, TextDelta(" way"), Finish(FinishReason.STOP),
                   Usage(3, 2))
    models = served(engine)
    models.start_reaper()
    answer = Exchange()
    stream = asyncio.ensure_future(exchange(
        create_app(models, ServerSettings()), "/api/chat",
        {"model": "fake-model", "messages": HELLO, "keep_alive": 0}, out=answer))
    try:
        while not answer.chunks:  # the first line is out: the stream waits at the gate
            assert not stream.done(), stream
            await asyncio.sleep(0.01)
        assert await models.unload_idle() == [] and models.is_loaded("fake-model")
        gate.set()
        await asyncio.wait_for(stream, PATIENCE)
    finally:
        gate.set()
        await models.aclose()
    lines = [json.loads(line) for line in answer.text.splitlines()]
    assert "".join(line["message"]["content"] for line in lines) == "Half way"
    assert lines[-1]["done"] is True and "error" not in lines[-1]
    await unloaded(models, "fake-model")  # by the reaper, once the call let go
