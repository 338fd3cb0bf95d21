"""Ollama's model endpoints on the REAL engine (SmolLM2-135M), the official `ollama`
client as oracle: `show` reports the GGUF's own fields, and `ps` what llama.cpp loaded
(the context, the planned memory, the keep_alive an Ollama call asked for)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import ollama
import pytest

from parlance.models.registry import ModelSpec, builtin_registry
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.real_engine import MODEL_ID, REQUEST_TIMEOUT

pytestmark = pytest.mark.model


def oracle(app) -> ollama.AsyncClient:
    return ollama.AsyncClient(host="http://parlance.test", timeout=REQUEST_TIMEOUT,
                              transport=httpx.ASGITransport(app=app))


async def test_show_and_ps_report_the_real_model(real_llama_engine, tmp_path):
    from parlance.cli.wiring import engine_loader, load_defaults
    from parlance.config import ServeConfig

    spec = builtin_registry()[MODEL_ID]
    cold = ModelSpec(id="local/smol-copy", locate=spec.locate, ctx_size=1024)
    config = ServeConfig(parallel=1, threads=2)
    models = ServedModels([ServedModel(spec, real_llama_engine, 0)], catalog=lambda: [cold],
                          loader=engine_loader(config), defaults=load_defaults(config),
                          idle_ttl=3600.0)
    client = oracle(create_app(models, ServerSettings(request_timeout=REQUEST_TIMEOUT)))
    try:
        shown = await client.show("smollm2:135m")  # Ollama's library name for it
        info = shown.modelinfo
        assert info["general.architecture"] == "llama"
        assert info["general.parameter_count"] == 134_515_008
        assert (info["llama.block_count"], info["llama.embedding_length"],
                info["llama.attention.head_count"], info["llama.attention.head_count_kv"],
                info["llama.context_length"]) == (30, 576, 9, 3, 8192)
        assert info["tokenizer.ggml.model"] == "gpt2" and info["tokenizer.ggml.tokens"] == []
        assert "<|im_start|>" in shown.template and shown.capabilities == ["completion", "tools"]
        assert shown.details.parameter_size == "134.52M"
        assert shown.details.quantization_level == "Q4_1"
        assert "num_ctx                        4096" in shown.parameters  # the built-in's ctx

        before = datetime.now(UTC)
        loaded = await client.generate(model="local/smol-copy:latest", keep_alive="10m")
        assert loaded.done_reason == "load"
        running = {m.model: m for m in (await client.ps()).models}
        assert list(running) == [f"{MODEL_ID}:latest", "local/smol-copy:latest"]
        pinned, copy = running.values()
        assert pinned.context_length == real_llama_engine.context_length
        assert copy.context_length == 1024 and copy.size_vram == 0
        assert copy.size == models.resolve("local/smol-copy")[0].size_bytes > 0
        assert before + timedelta(minutes=10) <= copy.expires_at
        assert copy.expires_at <= datetime.now(UTC) + timedelta(minutes=10)
        assert pinned.expires_at > before + timedelta(days=365 * 200)  # never unloaded
        assert copy.digest == pinned.digest  # the same file
        assert copy.details.family == "llama"
    finally:
        await models.unload("local/smol-copy")
