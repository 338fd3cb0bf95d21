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


def test_serve_with_absurd_load_settings_fails_fast_naming_the_flag(tmp_path, monkeypatch,
                                                                    capsys):
    """Refused by the load plan before llama.cpp allocates anything (issue 15: a context
    of 10^9 tokens x 64 slots was an OOM kill)."""
    import parlance.cli

    monkeypatch.chdir(tmp_path)
    loads = []
    monkeypatch.setattr(parlance.cli, "_engine_loader",
                        lambda config: lambda *args: loads.append(args))
    assert main(["serve", "--ctx-size", "1000000000", "--parallel", "64"]) == 2
    err = capsys.readouterr().err
    assert "context_length" in err and "1000000000" in err and "--ctx-size" in err
    assert main(["serve", "--parallel", "1000"]) == 2
    assert "--parallel" in capsys.readouterr().err
    assert main(["serve", "--memory-budget-mb", "100"]) == 2
    err = capsys.readouterr().err
    assert "memory budget" in err and "--model" in err
    assert loads == []
