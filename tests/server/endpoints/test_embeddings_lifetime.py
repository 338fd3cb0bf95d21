"""Embeddings and the model's lifetime, with a scripted loader: a cold model loads just in
time (Ollama's `options.num_ctx` is its context, `load_duration` reports the wait),
and `keep_alive` rules the unload as for chat calls."""

from __future__ import annotations

from tests.support.scripted_models import COLD_NAME as COLD
from tests.support.scripted_models import unloaded


async def test_a_cold_model_loads_with_num_ctx_and_reports_the_wait(scripted):
    models, client, loader = scripted
    first = (await client.post("/api/embed", json={"model": COLD, "input": "a b",
                                                   "options": {"num_ctx": 1024}})).json()
    assert loader.loaded == [COLD] and len(first["embeddings"]) == 1
    assert first["load_duration"] > 0
    assert models.resolve(COLD)[0].engine.context_length == 1024
    again = (await client.post("/api/embed", json={"model": COLD, "input": "a b"})).json()
    assert "load_duration" not in again and again["embeddings"] == first["embeddings"]


async def test_openai_embeddings_load_a_cold_model_just_in_time(scripted):
    _, client, loader = scripted
    response = await client.post("/v1/embeddings", json={"model": COLD, "input": ["x", "y"]})
    assert response.status_code == 200 and len(response.json()["data"]) == 2
    assert loader.loaded == [COLD]


async def test_keep_alive_0_unloads_once_the_call_ends(scripted):
    models, client, _ = scripted
    response = await client.post("/api/embed", json={"model": COLD, "input": "a",
                                                     "keep_alive": 0})
    assert response.status_code == 200
    await unloaded(models, COLD)
    load = await client.post("/api/embeddings", json={"model": COLD, "keep_alive": 0})
    assert load.json() == {"embedding": []}  # loaded for the call, then let go again
    await unloaded(models, COLD)
