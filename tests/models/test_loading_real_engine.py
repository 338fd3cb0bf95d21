"""A model whose file llama.cpp cannot load (issue 39: a planted, truncated GGUF): a
chat naming it is a 422 that names the model, never a 500 with the server's paths."""

from __future__ import annotations

import httpx
import pytest

from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.real_engine import MODEL_ID, model_path

pytestmark = pytest.mark.model


async def test_a_broken_model_file_is_a_422_naming_the_model_not_the_path(real_llama_engine,
                                                                         tmp_path):
    from parlance.cli.wiring import engine_loader
    from parlance.config import ServeConfig
    from parlance.models.registry import builtin_registry

    broken = tmp_path / "models" / "planted" / "broken.gguf"
    broken.parent.mkdir(parents=True)
    with model_path().open("rb") as whole:  # the header and metadata, not the tensors
        broken.write_bytes(whole.read(4 * 2**20))
    spec = builtin_registry()[MODEL_ID]
    planted = ModelSpec(id="planted/broken", locate=lambda: broken, ctx_size=512)
    models = ServedModels([ServedModel(spec, real_llama_engine, 0)], catalog=lambda: [planted],
                          loader=engine_loader(ServeConfig(parallel=1, threads=2)))
    app = create_app(models, ServerSettings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://parlance.test", timeout=120) as client:
        answer = await client.post("/v1/chat/completions", json={
            "model": "planted/broken", "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert "planted/broken" in error["message"] and error["code"] == "model_unusable"
    assert str(tmp_path) not in answer.text and "broken.gguf" not in answer.text
