"""Model management over HTTP with a scripted loader: the LM Studio model list,
load/unload (and a load asked for as a stream: its progress), just-in-time loads inside
`/api/v1/chat` (model_load events, single flight, failures), the idle TTL, the memory
budget, and downloads."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from parlance.core.errors import InvalidRequest
from parlance.engines.fake import FakeEngine
from parlance.models.load_plan import LoadDefaults, LoadOptions, plan_load
from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.fake_app import FAKE_SPEC
from tests.support.lmstudio_contract import (
    check_load_answer,
    check_result,
    checked_events,
    checked_load_events,
)
from tests.support.model_origin import DATA, OriginServer
from tests.support.scripted_models import COLD, ScriptedLoader, make, smollm2_path

CHAT = "/api/v1/chat"


@pytest.fixture
def loader() -> ScriptedLoader:
    return ScriptedLoader()


@pytest.fixture
async def client(loader) -> AsyncIterator[httpx.AsyncClient]:
    _, app = make(loader)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as c:
        yield c


async def test_openai_model_list_also_shows_models_that_load_on_first_use(client, loader):
    listing = (await client.get("/v1/models")).json()
    assert [m["id"] for m in listing["data"]] == ["fake-model", "acme/cold-model"]
    cold = listing["data"][1]
    assert cold["object"] == "model" and cold["created"] == int(smollm2_path().stat().st_mtime)
    one = (await client.get("/v1/models/acme/cold-model")).json()
    assert one == cold and loader.loaded == []  # listing never loads anything
    assert (await client.get("/v1/models/acme/nope")).status_code == 404


async def test_model_list_shows_loaded_and_loadable_models(client):
    models = (await client.get("/api/v1/models")).json()["models"]
    assert [m["key"] for m in models] == ["fake-model", "acme/cold-model"]
    cold = models[1]
    assert cold["loaded_instances"] == [] and cold["publisher"] == "acme"
    assert cold["architecture"] == "llama" and cold["format"] == "gguf"
    assert cold["quantization"]["name"] == "Q4_1" and cold["params_string"] == "135M"
    assert cold["max_context_length"] == 8192 and cold["size_bytes"] > 90_000_000
    assert cold["capabilities"] == {"vision": False, "trained_for_tool_use": False,
                                   "chat_format": "generic"}
    assert models[0]["loaded_instances"][0]["id"] == "fake-model"


async def test_load_and_unload(client, loader):
    response = await client.post("/api/v1/models/load", json={
        "model": "acme/cold-model", "context_length": 1024, "echo_load_config": True})
    body = response.json()
    assert body["type"] == "llm" and body["status"] == "loaded"
    assert body["instance_id"] == "acme/cold-model" and body["load_time_seconds"] > 0
    assert body["load_config"]["context_length"] == 1024
    listed = (await client.get("/api/v1/models")).json()["models"]
    assert listed[1]["loaded_instances"][0]["config"]["context_length"] == 1024
    again = await client.post("/api/v1/models/load", json={"model": "acme/cold-model"})
    assert again.json()["instance_id"] == "acme/cold-model" and loader.loaded == [
        "acme/cold-model"]
    assert (await client.post("/api/v1/models/unload",
                              json={"instance_id": "acme/cold-model"})).json() == {
        "instance_id": "acme/cold-model"}
    missing = await client.post("/api/v1/models/unload", json={"instance_id": "acme/cold-model"})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "model_not_found"
    unknown = await client.post("/api/v1/models/load", json={"model": "nope"})
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "model_not_found"


STREAMED = {"accept": "text/event-stream"}


async def test_a_load_asked_for_as_a_stream_shows_its_progress(client, loader):
    plain = await client.post("/api/v1/models/load", json={"model": "fake-model"})
    assert plain.headers["content-type"] == "application/json"  # LM Studio's: no stream
    check_load_answer(plain.json())
    response = await client.post("/api/v1/models/load", headers=STREAMED, json={
        "model": "acme/cold-model", "context_length": 1024, "echo_load_config": True})
    assert response.headers["content-type"].startswith("text/event-stream")
    events = checked_load_events(response.text)
    progress = [d["progress"] for n, d in events if n == "model_load.progress"]
    assert len(progress) >= 2 and progress[-1] == 1.0
    end = events[-1][1]
    assert events[-1][0] == "model_load.end" and end["model_instance_id"] == "acme/cold-model"
    assert end["result"]["load_time_seconds"] == end["load_time_seconds"] > 0
    assert end["result"]["load_config"]["context_length"] == 1024
    assert loader.loaded == ["acme/cold-model"]
    # loaded already: no progress, and no second load
    again = checked_load_events((await client.post(
        "/api/v1/models/load", headers=STREAMED, json={"model": "acme/cold-model"})).text)
    assert [n for n, _ in again] == ["model_load.start", "model_load.end"]
    assert "load_config" not in again[-1][1]["result"] and loader.loaded == ["acme/cold-model"]


async def test_a_load_asked_for_as_a_stream_is_refused_before_it_starts(client, loader):
    unknown = await client.post("/api/v1/models/load", json={"model": "nope"},
                                headers=STREAMED)
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "model_not_found"
    absurd = await client.post("/api/v1/models/load", headers=STREAMED,
                               json={"model": "acme/cold-model", "context_length": 63})
    lmstudio_error(absurd, "context_length")
    assert loader.loaded == []


async def test_a_load_that_fails_ends_its_stream_with_the_error():
    _, app = make(ScriptedLoader(fail=True))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as http:
        response = await http.post("/api/v1/models/load", headers=STREAMED,
                                   json={"model": "acme/cold-model"})
    assert response.status_code == 200  # the stream had begun
    events = checked_load_events(response.text)
    message = events[-1][1]["error"]["message"]
    # the loader's own words stay in the log (they may name server paths)
    assert events[-1][0] == "error" and "acme/cold-model" in message and "corrupt" not in message


async def test_chat_loads_a_cold_model_and_reports_it(client, loader):
    response = await client.post(CHAT, json={"model": "acme/cold-model", "input": "hi",
                                             "stream": True})
    events = checked_events(response.text)
    names = [n for n, _ in events]
    assert names[:3] == ["chat.start", "model_load.start", "model_load.progress"]
    end = names.index("model_load.end")
    assert all(n == "model_load.progress" for n in names[2:end])
    progress = [d["progress"] for n, d in events if n == "model_load.progress"]
    assert progress == sorted(progress) and progress[-1] == 1.0
    assert events[end][1]["load_time_seconds"] > 0
    result = events[-1][1]["result"]
    assert result["stats"]["model_load_time_seconds"] > 0
    assert result["model_instance_id"] == "acme/cold-model"
    # loaded now: the next request sees no load
    warm = await client.post(CHAT, json={"model": "acme/cold-model", "input": "hi",
                                         "stream": True})
    assert "model_load.start" not in warm.text
    body = (await client.post(CHAT, json={"model": "acme/cold-model", "input": "hi"})).json()
    check_result(body)
    assert "model_load_time_seconds" not in body["stats"]


async def test_non_stream_chat_reports_the_load_time_and_sets_the_context(client):
    body = (await client.post(CHAT, json={"model": "acme/cold-model", "input": "hi",
                                          "context_length": 1000})).json()
    check_result(body)
    assert body["stats"]["model_load_time_seconds"] > 0
    listed = (await client.get("/api/v1/models")).json()["models"]
    assert listed[1]["loaded_instances"][0]["config"]["context_length"] == 1000


async def test_concurrent_requests_share_one_load(client, loader):
    responses = await asyncio.gather(*(
        client.post(CHAT, json={"model": "acme/cold-model", "input": "hi", "stream": True})
        for _ in range(4)))
    assert loader.loaded == ["acme/cold-model"]
    loads = [r.text.count("event: model_load.end") for r in responses]
    assert sorted(loads) == [0, 0, 0, 1]
    for response in responses:
        checked_events(response.text)


async def test_openai_endpoints_load_just_in_time_too(client, loader):
    response = await client.post("/v1/chat/completions", json={
        "model": "acme/cold-model", "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 200 and response.json()["model"] == "acme/cold-model"
    assert loader.loaded == ["acme/cold-model"]


async def test_a_failed_load_ends_the_stream_by_contract():
    _, app = make(ScriptedLoader(fail=True))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        events = checked_events((await client.post(CHAT, json={
            "model": "acme/cold-model", "input": "hi", "stream": True})).text)
        error = dict(events)["error"]["error"]
        assert error["type"] == "internal_error" and "RuntimeError" in error["message"]
        assert [n for n, _ in events][-2:] == ["error", "chat.end"]
        response = await client.post(CHAT, json={"model": "acme/cold-model", "input": "hi"})
        assert response.status_code == 500
        assert response.json()["error"]["code"] == "model_load_failed"


async def test_idle_ttl_unloads_only_models_loaded_on_demand(loader):
    models, _ = make(loader, idle_ttl=60)
    await models.acquire("acme/cold-model")
    assert await models.unload_idle(now=time.monotonic() + 30) == []
    assert await models.unload_idle(now=time.monotonic() + 120) == ["acme/cold-model"]
    assert [m.spec.id for m in models] == ["fake-model"]  # pinned: not loaded on demand


def estimated(spec: ModelSpec = COLD, **chosen: int) -> int:
    """What a load of `spec` is estimated to take (weights, KV cache, compute)."""
    return plan_load(spec, LoadOptions(**chosen), LoadDefaults()).memory.total


async def test_memory_budget_unloads_the_least_recently_used(loader):
    size = estimated()
    assert size > 4 * smollm2_path().stat().st_size  # the KV cache counts, not just the file
    other = ModelSpec(id="acme/other", locate=smollm2_path)
    warm = ServedModel(FAKE_SPEC, FakeEngine(), 1700000000)
    models = ServedModels([warm], catalog=lambda: [COLD, other], loader=loader,
                          memory_budget=int(size * 1.5))
    await models.acquire("acme/cold-model")
    assert [m.size_bytes for m in models] == [0, size]
    await models.acquire("acme/other")
    assert [m.spec.id for m in models] == ["fake-model", "acme/other"]
    too_big = ServedModels([warm], catalog=lambda: [COLD], loader=loader,
                           memory_budget=size // 2)
    with pytest.raises(InvalidRequest, match="more than this server's memory budget"):
        await too_big.acquire("acme/cold-model")
    assert loader.loaded == ["acme/cold-model", "acme/other"]  # the refused one never loaded


# -- load settings held to ranges and memory -------------------------

LOAD = "/api/v1/models/load"


def lmstudio_error(response: httpx.Response, param: str) -> dict:
    """LM Studio's error envelope, a 400 naming `param`."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request" and error["param"] == param, error
    return error


@pytest.mark.parametrize(("chosen", "param"), [
    ({"context_length": 1_000_000_000, "parallel": 64}, "context_length"),  # the OOM kill
    ({"context_length": 2**32 + 64}, "context_length"),  # loaded with 256 cells before
    ({"context_length": 2**22 + 1}, "context_length"),  # over MAX_CONTEXT
    ({"context_length": 63}, "context_length"),
    ({"context_length": 0}, "context_length"),
    ({"parallel": 0}, "parallel"),
    ({"parallel": 65}, "parallel"),
    ({"parallel": 8, "eval_batch_size": 4}, "eval_batch_size"),  # a step holds every slot
    ({"eval_batch_size": 1_000_000}, "eval_batch_size"),
])
async def test_absurd_load_settings_get_a_400_and_allocate_nothing(client, loader, chosen,
                                                                   param):
    response = await client.post(LOAD, json={"model": "acme/cold-model", **chosen})
    error = lmstudio_error(response, param)
    assert str(list(chosen.values())[0]) in error["message"] or "between" in error["message"]
    assert loader.loaded == []


async def test_the_largest_settings_in_range_load(client, loader):
    response = await client.post(LOAD, json={"model": "acme/cold-model", "context_length": 8192,
                                             "parallel": 2, "eval_batch_size": 2,
                                             "echo_load_config": True})
    assert response.status_code == 200, response.text
    assert response.json()["load_config"]["context_length"] == 8192
    assert loader.loaded == ["acme/cold-model"]


async def test_a_load_larger_than_the_budget_is_refused_naming_what_the_client_chose(loader):
    small = estimated(context_length=1024, parallel=1)
    models, app = make(loader, memory_budget=small + (1 << 20))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as http:
        error = lmstudio_error(await http.post(LOAD, json={
            "model": "acme/cold-model", "context_length": 8192, "parallel": 1}),
            "context_length")
        assert "memory budget" in error["message"] and "KV cache" in error["message"]
        assert "The largest context_length that fits is 1024." in error["message"]
        error = lmstudio_error(await http.post(LOAD, json={
            "model": "acme/cold-model", "parallel": 4}), "parallel")
        assert loader.loaded == []
        ok = await http.post(LOAD, json={"model": "acme/cold-model", "context_length": 1024,
                                         "parallel": 1})
        assert ok.status_code == 200 and loader.loaded == ["acme/cold-model"]
        assert models.is_loaded("acme/cold-model")


async def test_a_load_larger_than_the_free_memory_is_refused(loader):
    # at least 256 MiB (a tenth of what is free) stays with the rest of the machine
    free = estimated(context_length=2048, parallel=1) + (300 << 20)
    models, app = make(loader, free_memory=lambda: free)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as http:
        error = lmstudio_error(await http.post(LOAD, json={
            "model": "acme/cold-model", "context_length": 8192, "parallel": 4}),
            "context_length")
        assert "the memory this machine has free" in error["message"]
        # the OpenAI routes load just in time with the server's defaults: their envelope
        response = await http.post("/v1/chat/completions", json={
            "model": "acme/cold-model", "messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "insufficient_memory"
        assert response.json()["error"]["param"] == "model"  # nothing chosen: the model
        assert loader.loaded == []
        ok = await http.post(LOAD, json={"model": "acme/cold-model", "context_length": 2048,
                                         "parallel": 1})
        assert ok.status_code == 200, ok.text


async def test_idle_models_are_unloaded_to_free_memory_for_a_load(loader):
    total = estimated() + estimated() // 2  # room for one such load, not two
    other = ModelSpec(id="acme/other", locate=smollm2_path)
    warm = ServedModel(FAKE_SPEC, FakeEngine(), 1700000000)
    models: ServedModels

    def free() -> int:  # what the loaded models leave, as the kernel would report it
        return total - sum(m.size_bytes for m in models) + (256 << 20)

    models = ServedModels([warm], catalog=lambda: [COLD, other], loader=loader,
                          free_memory=free)
    await models.acquire("acme/cold-model")
    await models.acquire("acme/other")
    assert [m.spec.id for m in models] == ["fake-model", "acme/other"]


async def test_chat_context_length_is_checked_by_the_same_plan(client, loader):
    for stream in (True, False):
        response = await client.post(CHAT, json={"model": "acme/cold-model", "input": "hi",
                                                 "context_length": 1_000_000_000,
                                                 "stream": stream})
        error = lmstudio_error(response, "context_length")  # before the stream starts
        assert "1000000000" in error["message"]
    assert loader.loaded == []
    # a loaded model ignores the option, but not an absurd value
    warm = await client.post(CHAT, json={"model": "fake-model", "input": "hi",
                                         "context_length": 0})
    lmstudio_error(warm, "context_length")
    fine = await client.post(CHAT, json={"model": "fake-model", "input": "hi",
                                         "context_length": 4096})
    assert fine.status_code == 200


async def test_an_absurd_reload_keeps_the_loaded_model(client, loader):
    first = await client.post(LOAD, json={"model": "acme/cold-model", "context_length": 1024})
    assert first.status_code == 200
    again = await client.post(LOAD, json={"model": "acme/cold-model",
                                          "context_length": 10**9})
    lmstudio_error(again, "context_length")
    listed = (await client.get("/api/v1/models")).json()["models"]
    assert listed[1]["loaded_instances"][0]["config"]["context_length"] == 1024


async def test_downloads_over_http(tmp_path):
    models = ServedModels([ServedModel(FAKE_SPEC, FakeEngine(), 1700000000)])
    app = create_app(models, ServerSettings(models_dir=tmp_path,
                                            download_allow_hosts=("127.0.0.1",)))
    with OriginServer() as origin:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            url = f"{origin.base_url}/plain/tiny-q4.gguf"
            job = (await client.post("/api/v1/models/download", json={"model": url})).json()
            assert job["status"] in ("downloading", "completed")
            deadline = time.monotonic() + 60  # a generous bound: the machine may be busy
            while time.monotonic() < deadline:
                status = (await client.get(
                    f"/api/v1/models/download/status/{job['job_id']}")).json()
                if status["status"] == "completed":
                    break
                await asyncio.sleep(0.02)
            assert status["status"] == "completed" and status["downloaded_bytes"] == len(DATA)
            again = await client.post("/api/v1/models/download", json={"model": url})
            assert again.json() == {"status": "already_downloaded"}
            catalog = await client.post("/api/v1/models/download",
                                        json={"model": "openai/gpt-oss-20b"})
            assert catalog.status_code == 400
            assert "catalog" in catalog.json()["error"]["message"]
            unknown = await client.get("/api/v1/models/download/status/job_nope")
            assert unknown.status_code == 404
            assert unknown.json()["error"]["type"] == "job_not_found"
    assert (tmp_path / "127.0.0.1" / "tiny-q4.gguf").read_bytes() == DATA


async def test_a_download_from_a_non_public_address_is_refused_at_request_time(tmp_path):
    models = ServedModels([ServedModel(FAKE_SPEC, FakeEngine(), 1700000000)])
    app = create_app(models, ServerSettings(models_dir=tmp_path))  # nothing allow-listed
    with OriginServer() as origin:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as client:
            for url in (f"{origin.base_url}/plain/tiny-q4.gguf",
                        "http://169.254.169.254/latest/tiny-q4.gguf"):
                refused = await client.post("/api/v1/models/download", json={"model": url})
                assert refused.status_code == 400
                error = refused.json()["error"]
                assert error["type"] == "invalid_request" and error["param"] == "model"
                assert "non-public address" in error["message"]
                assert "--download-allow-host" in error["message"]
        assert origin.app.state.origin.requests == []
    assert list(tmp_path.iterdir()) == []
