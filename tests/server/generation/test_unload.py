"""A model unloaded (or loaded again with another context) while it generates: every
running stream ends as a failure by its dialect's contract (`model_unloaded`), never
as if it had finished; a stream the engine ends without its final usage is a failure
too; and the default model still answers requests that name no model afterwards."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine
from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.asgi_exchange import Exchange, exchange, until
from tests.support.fake_app import make_app

UNLOADED = "model_unloaded"
HELLO = [{"role": "user", "content": "Hello!"}]


def smollm2_path():
    from parlance.models.registry import BUILTIN

    return BUILTIN[0].locate()


# A real GGUF behind it, so that loading it again can be planned from its header.
DEFAULT = ModelSpec(id="default-model", locate=smollm2_path)
STREAMS = {
    "/v1/chat/completions": {"messages": HELLO, "stream": True},
    "/v1/completions": {"prompt": "Hello", "stream": True},
    "/v1/responses": {"input": "Hello!", "stream": True},
    "/api/v1/chat": {"model": "default-model", "input": "Hello!", "stream": True},
}


class Loader:
    def __init__(self) -> None:
        self.engines: list[FakeEngine] = []

    def __call__(self, spec, plan, on_progress) -> FakeEngine:
        self.engines.append(FakeEngine(context_length=plan.context_length or 2048))
        return self.engines[-1]


def endless(engine: FakeEngine, count: int) -> None:
    for _ in range(count):
        engine.enqueue(TextDelta("Hi"), 600.0, Finish(FinishReason.STOP), Usage(1, 1))


def serve(engine: FakeEngine) -> tuple[Loader, object]:
    loader = Loader()
    models = ServedModels([ServedModel(DEFAULT, engine, 1700000000)], loader=loader)
    return loader, create_app(models, ServerSettings())


async def start_all(app, engine: FakeEngine) -> dict[str, asyncio.Task[Exchange]]:
    running = {path: asyncio.create_task(exchange(app, path, body))
               for path, body in STREAMS.items()}
    running["non-stream"] = asyncio.create_task(
        exchange(app, "/v1/chat/completions", {"messages": HELLO}))
    await until(lambda: len(engine.generations) == len(running) and all(
        g.yielded for g in engine.generations), "every generation under way")
    return running


def assert_failed_by_contract(done: dict[str, Exchange], code: str) -> None:
    assert all(exchanged.ended for exchanged in done.values())
    for path in ("/v1/chat/completions", "/v1/completions"):
        frames = done[path].sse()
        assert frames[-2]["error"]["code"] == code and frames[-1] == "[DONE]", path
        assert not any(c.get("finish_reason") for f in frames if isinstance(f, dict)
                       for c in f.get("choices", ())), path
    responses = done["/v1/responses"]
    assert responses.events()[-1] == "response.failed"
    assert responses.sse()[-2]["response"]["error"]["code"] == code
    lmstudio = done["/api/v1/chat"]
    assert lmstudio.events()[-2:] == ["error", "chat.end"]
    assert lmstudio.sse()[-2]["error"]["code"] == code


async def test_unload_mid_stream_fails_every_stream_and_the_default_loads_again():
    engine = FakeEngine()
    endless(engine, len(STREAMS) + 1)
    loader, app = serve(engine)
    running = await start_all(app, engine)

    unload = await exchange(app, "/api/v1/models/unload", {"instance_id": "default-model"})
    done = {name: await task for name, task in running.items()}

    assert unload.status == 200
    assert_failed_by_contract(done, UNLOADED)
    assert done["non-stream"].status == 503
    assert done["non-stream"].json()["error"]["code"] == UNLOADED

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        again = await client.post("/v1/chat/completions", json={"messages": HELLO})
        listed = await client.get("/v1/models")
    assert again.status_code == 200, again.text
    assert again.json()["model"] == "default-model"
    assert again.json()["choices"][0]["message"]["content"] == "Hello there!"
    assert len(loader.engines) == 1 and loader.engines[0].requests
    assert [m["id"] for m in listed.json()["data"]] == ["default-model"]


async def test_loading_again_with_another_context_fails_the_running_streams():
    engine = FakeEngine()
    endless(engine, len(STREAMS) + 1)
    loader, app = serve(engine)
    running = await start_all(app, engine)

    load = await exchange(app, "/api/v1/models/load",
                          {"model": "default-model", "context_length": 1024})
    done = {name: await task for name, task in running.items()}

    assert load.status == 200, load.text
    assert_failed_by_contract(done, UNLOADED)
    assert loader.engines[0].context_length == 1024


@pytest.mark.parametrize("stream", [True, False])
async def test_a_generation_that_ends_without_its_usage_is_a_failure(stream):
    engine = FakeEngine()
    engine.enqueue(TextDelta("cut"))  # no Finish, no Usage: the engine broke its contract
    app = make_app(engine)
    answer = await exchange(app, "/v1/chat/completions", {"messages": HELLO, "stream": stream})
    if stream:
        frames = answer.sse()
        assert frames[-2]["error"]["code"] == "incomplete_stream" and frames[-1] == "[DONE]"
    else:
        assert answer.status == 500 and answer.json()["error"]["code"] == "incomplete_stream"


@pytest.mark.model
async def test_real_engine_unloaded_mid_stream_ends_the_stream_as_a_failure():
    """The llama.cpp scheduler, closed while it decodes, fails its running jobs."""
    from parlance.engines.llamacpp import LlamaCppEngine
    from parlance.engines.llamacpp.model import ContextSettings
    from tests.support.real_engine import MODEL_ID, no_eog_bias

    engine = LlamaCppEngine.load(smollm2_path(), ContextSettings(n_ctx=2048, n_threads=2,
                                                                 parallel=2))
    spec = ModelSpec(id=MODEL_ID, locate=smollm2_path)
    app = create_app(ServedModels([ServedModel(spec, engine, int(time.time()))]),
                     ServerSettings())
    body = {"messages": HELLO, "stream": True, "max_tokens": 1500, "temperature": 0,
            "logit_bias": no_eog_bias(engine)}
    seen = Exchange()
    task = asyncio.create_task(exchange(app, "/v1/chat/completions", body, out=seen,
                                        timeout=300))
    await until(lambda: len(seen.chunks) >= 5, "tokens streaming", timeout=300)

    unload = await exchange(app, "/api/v1/models/unload", {"instance_id": MODEL_ID},
                            timeout=300)
    frames = (await task).sse()

    assert unload.status == 200
    assert frames[-2]["error"]["code"] == UNLOADED and frames[-1] == "[DONE]"
    assert not any(f["choices"][0]["finish_reason"] for f in frames[:-2])
