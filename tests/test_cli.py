"""The CLI: `parlance models` lists the registry; bad input exits 2 with a message."""

from __future__ import annotations

from parlance.cli import main


def test_models_lists_builtin_and_presets(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "parlance.toml").write_text('[presets.mine]\nmodel = "smollm2"\n')
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m-instruct" in out and "mine" in out


def test_serve_with_unknown_model_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["serve", "--model", "does-not-exist"]) == 2
    assert "Unknown model" in capsys.readouterr().err
