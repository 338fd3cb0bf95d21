"""Deleting a model by name (models/removal.py), without HTTP: which names may be
deleted, and when the names given at run time changed (they are saved then)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parlance.core.errors import InvalidRequest, ModelNotFound
from parlance.engines.fake import FakeEngine
from parlance.models.registry import ModelSpec
from parlance.models.removal import deletable_files, delete_model
from parlance.models.served import ServedModel, ServedModels
from tests.support.gguf_writer import BASE_KV, TENSORS, write_gguf


def gguf(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_gguf(path, BASE_KV, TENSORS)
    return path


def spec_at(model_id: str, path: Path, *aliases: str) -> ModelSpec:
    return ModelSpec(id=model_id, locate=lambda: path, aliases=aliases)


@pytest.fixture
def tree(tmp_path):
    models_dir = tmp_path / "models"
    started = spec_at("started", gguf(models_dir / "started.gguf"))
    tiny = spec_at("acme/tiny", gguf(models_dir / "acme" / "tiny.gguf"), "little")
    outside = spec_at("outside", gguf(tmp_path / "outside.gguf"))
    models = ServedModels([ServedModel(started, FakeEngine(), 1700000000)],
                          catalog=lambda: [s for s in (tiny, outside) if s.locate().exists()])
    return models, models_dir, tiny


def test_the_rules_name_what_they_refuse(tree):
    models, models_dir, tiny = tree
    files = deletable_files("acme/tiny:latest", tiny, default=models.default_spec,
                            models_dir=models_dir)
    assert files == [tiny.locate().resolve()]
    for name, spec, why in [
            ("little", tiny, "configured name of the model 'acme/tiny'"),
            ("started", models.spec("started"), "the model this server was started with"),
            ("outside", models.spec("outside"), "not a downloaded model")]:
        with pytest.raises(InvalidRequest, match=why) as caught:
            deletable_files(name, spec, default=models.default_spec, models_dir=models_dir)
        assert caught.value.param == "model"
    with pytest.raises(InvalidRequest, match="not a downloaded model"):
        deletable_files("acme/tiny", tiny, default=None, models_dir=None)


async def test_deleting_says_when_the_run_time_names_changed(tree):
    models, models_dir, tiny = tree
    models.copy("acme/tiny", "mine")
    assert await delete_model(models, "mine", models_dir)  # a copy: only forgotten
    assert tiny.locate().is_file() and "mine" not in models.copies
    assert not await delete_model(models, "acme/tiny", models_dir)  # no copy of it left
    assert not tiny.locate().exists() and not (models_dir / "acme").exists()
    with pytest.raises(ModelNotFound):
        await delete_model(models, "acme/tiny", models_dir)


async def test_deleting_a_loaded_model_unloads_it_and_forgets_its_copies(tree):
    models, models_dir, tiny = tree
    loaded = ServedModels([ServedModel(models.spec("started"), FakeEngine(), 1700000000),
                           ServedModel(tiny, FakeEngine(), 1700000000)])
    loaded.copy("acme/tiny", "mine")
    assert loaded.is_loaded("acme/tiny")
    assert await delete_model(loaded, "acme/tiny", models_dir)
    assert not loaded.is_loaded("acme/tiny") and loaded.copies == {}
    assert not tiny.locate().exists()
