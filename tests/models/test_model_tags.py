"""Ollama's `name:tag` names in the one registry lookup every dialect uses: `:latest`
is the untagged name and back, other tags only match names that carry them, the name
sent is echoed; names given at run time (Ollama's /api/copy) resolve the same way and
can be kept in a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from parlance.core.errors import InvalidRequest, ModelNotFound
from parlance.engines.fake import FakeEngine
from parlance.models.copies import CopyFile
from parlance.models.registry import (
    DEFAULT_MODEL,
    ModelSpec,
    builtin_registry,
    name_variants,
    resolve_spec,
    split_tag,
    tagged,
)
from parlance.models.served import ServedModel, ServedModels

NULL = Path("/dev/null")


@pytest.mark.parametrize(("name", "split"), [
    ("smollm2", ("smollm2", None)),
    ("smollm2:135m", ("smollm2", "135m")),
    ("llama3.2:latest", ("llama3.2", "latest")),
    ("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",
     ("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF", "Q4_K_M")),
    ("localhost:11434/library/model", ("localhost:11434/library/model", None)),  # a port
    ("acme/cold-model", ("acme/cold-model", None)),
])
def test_the_tag_follows_the_last_colon_of_the_last_segment(name, split):
    assert split_tag(name) == split


def test_variants_and_listed_names():
    assert name_variants("smollm2") == ("smollm2", "smollm2:latest")
    assert name_variants("smollm2:latest") == ("smollm2:latest", "smollm2")
    assert name_variants("smollm2:135m") == ("smollm2:135m",)  # no fallback to another tag
    assert name_variants(":latest") == (":latest",)
    assert tagged("smollm2") == "smollm2:latest" and tagged("smollm2:135m") == "smollm2:135m"


def _models() -> ServedModels:
    engine = FakeEngine()
    general = ModelSpec(id="general", locate=lambda: NULL, aliases=("claude-*", "mine:v2"))
    pinned = ModelSpec(id="pinned:latest", locate=lambda: NULL)
    cold = ModelSpec(id="acme/cold-model", locate=lambda: NULL)
    return ServedModels([ServedModel(general, engine, 1), ServedModel(pinned, engine, 2)],
                        catalog=lambda: [cold])


def test_latest_and_explicit_tags_resolve_loaded_models_and_echo_the_name_sent():
    models = _models()
    assert models.resolve("general:latest") == (models.resolve("general")[0], "general:latest")
    assert models.resolve("mine:v2")[0].spec.id == "general"  # an alias carrying a tag
    assert models.resolve("pinned")[0].spec.id == "pinned:latest"  # `:latest` added
    assert models.resolve("claude-opus:latest")[0].spec.id == "general"  # a glob, tagged
    for unknown in ("general:v2", "mine", "mine:latest"):  # another tag is another model
        with pytest.raises(ModelNotFound):
            models.resolve(unknown)
    assert models.spec("acme/cold-model:latest").id == "acme/cold-model"  # the catalog too
    assert not models.is_loaded("acme/cold-model:latest")


def test_the_exact_name_wins_over_its_tag_variant():
    engine = FakeEngine()
    plain = ModelSpec(id="x", locate=lambda: NULL)
    latest = ModelSpec(id="x:latest", locate=lambda: NULL)
    models = ServedModels([ServedModel(plain, engine, 1), ServedModel(latest, engine, 2)])
    assert models.resolve("x")[0].spec.id == "x"
    assert models.resolve("x:latest")[0].spec.id == "x:latest"


def test_the_registry_resolves_ollama_names_of_the_default_model():
    registry = builtin_registry()
    for name in ("smollm2:135m", "smollm2:latest", f"{DEFAULT_MODEL}:latest", "smollm2"):
        assert resolve_spec(name, registry).id == DEFAULT_MODEL
    with pytest.raises(InvalidRequest, match="Unknown model 'smollm2:1.7b'"):
        resolve_spec("smollm2:1.7b", registry)


def test_copies_are_names_like_aliases_without_changing_the_model():
    models = _models()
    spec = models.copy("general:latest", "backup")
    assert spec.id == "general" and models.copies == {"backup": "general"}
    assert models.resolve("backup:latest") == (models.resolve("general")[0], "backup:latest")
    assert models.resolve("general")[0].spec.aliases == ("claude-*", "mine:v2")
    models.copy("acme/cold-model", "cold:fast")  # a model not loaded yet
    assert models.spec("cold:fast").id == "acme/cold-model"
    with pytest.raises(ModelNotFound):
        models.spec("cold")  # the copy carries a tag: `cold` is `cold:latest`
    models.copy("pinned", "backup:latest")  # a copy's name is pointed anew (any variant)
    assert models.copies == {"cold:fast": "acme/cold-model", "backup:latest": "pinned:latest"}
    assert models.resolve("backup")[0].spec.id == "pinned:latest"


def test_a_copy_never_takes_a_configured_name():
    models = _models()
    with pytest.raises(InvalidRequest, match="already names the model 'general'"):
        models.copy("pinned", "mine:v2")
    with pytest.raises(InvalidRequest, match="already names the model 'pinned:latest'"):
        models.copy("general", "pinned")
    with pytest.raises(ModelNotFound):
        models.copy("nope", "whatever")
    with pytest.raises(InvalidRequest, match="destination"):
        models.copy("general", " padded ")
    models.copy("general", "general:latest")  # a name the model has already: nothing to add
    assert models.copies == {}
    models.copy("general", "claude-special")  # a glob's name: the copy is more exact
    assert models.copies == {"claude-special": "general"}


@pytest.mark.parametrize("name", ["x" * 1_048_576, "x" * 257, "a\x00b", "tab\tname",
                                  "line\nbreak", "two words", "zero\u200bwidth", "\x7f", ""])
def test_a_copy_name_must_be_short_and_printable(name):
    models = _models()
    with pytest.raises(InvalidRequest) as caught:
        models.copy("general", name)
    assert caught.value.param == "destination" and len(caught.value.message) < 200
    assert models.copies == {}
    models.copy("general", "x" * 256)
    models.copy("general", "hf.co/owner/repo-v1.2_b:Q4_K_M")


def test_copies_are_capped_and_pointing_one_anew_is_not_another(monkeypatch):
    from parlance.models import names

    monkeypatch.setattr(names, "MAX_COPIES", 3)
    models = _models()
    for name in ("a", "b", "c"):
        models.copy("general", name)
    with pytest.raises(InvalidRequest, match="at most 3 copied names"):
        models.copy("general", "d")
    models.copy("pinned", "c:latest")  # the same name pointed anew
    assert models.copies == {"a": "general", "b": "general", "c:latest": "pinned:latest"}
    models.forget_copy("a")
    models.copy("general", "d")


def test_forgetting_copies():
    models = _models()
    models.copy("general", "a")
    models.copy("general", "b:v1")
    models.copy("pinned", "c")
    assert models.forget_copy("a:latest") == "general"
    assert models.forget_copy("a") is None
    assert models.forget_copies_of("general") == ["b:v1"]
    assert models.copies == {"c": "pinned:latest"}


def test_the_copy_file_round_trips_and_survives_garbage(tmp_path: Path):
    path = tmp_path / "data" / "model_copies.json"
    kept = CopyFile(path)
    assert kept.load() == {}
    kept.save({"mine:latest": "general", "b": "pinned"})
    assert CopyFile(path).load() == {"mine:latest": "general", "b": "pinned"}
    assert not path.with_name(path.name + ".tmp").exists()
    for garbage in ("{", '{"copies": [1]}', '{"copies": {"a": 1}}', "[]"):
        path.write_text(garbage)
        assert CopyFile(path).load() == {}
    assert CopyFile(None).load() == {}
    CopyFile(None).save({"a": "b"})  # nowhere to keep them: a no-op
