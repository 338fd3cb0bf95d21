"""The CLI: `parlance models` lists the registry; bad input exits 2 with a message."""

from __future__ import annotations

import argparse

import pytest

import parlance.cli.wiring
from parlance.cli.dispatch import build_parser, main
from parlance.config import SERVE_DEFAULTS, ServeConfig


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
    """Refused by the load plan before llama.cpp allocates anything (a context
    of 10^9 tokens x 64 slots was an OOM kill)."""

    monkeypatch.chdir(tmp_path)
    loads = []
    monkeypatch.setattr(parlance.cli.wiring, "engine_loader",
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


def _serve_parser() -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["serve"]


def test_every_serve_flag_says_what_it_does_and_its_default():
    actions = [a for a in _serve_parser()._actions if a.dest != "help"]
    flags = {a.dest for a in actions}
    assert flags >= set(SERVE_DEFAULTS) - {"upstreams", "local_model"}  # every setting
    for action in actions:
        text = action.help or ""
        own = text.split(" [env ")[0]
        assert len(own) > 20, f"{action.option_strings}: no help of its own"
        assert "default" in text, f"{action.option_strings}: its default is not said"
        default = SERVE_DEFAULTS.get(action.dest)
        if isinstance(default, bool):
            assert "default off" in text, action.option_strings
        elif isinstance(default, int | float) or default:
            shown = f"{default:g}" if isinstance(default, float) else str(default)
            assert f"[default {shown}; " in text, action.option_strings


def test_strict_max_tokens_is_a_setting():
    assert ServeConfig().strict_max_tokens is False
    args = _serve_parser().parse_args(["--strict-max-tokens"])
    assert args.strict_max_tokens is True


def test_batch_invariance_is_on_where_the_build_makes_it_free():
    from parlance.cli.wiring import batch_invariant_setting
    from parlance.engines.llamacpp import invariant_attention

    assert ServeConfig().batch_invariant is None
    assert batch_invariant_setting(ServeConfig()) is invariant_attention.available()
    assert _serve_parser().parse_args(["--batch-invariant"]).batch_invariant is True
    assert _serve_parser().parse_args(["--no-batch-invariant"]).batch_invariant is False
    assert batch_invariant_setting(ServeConfig(batch_invariant=False)) is False
    assert batch_invariant_setting(ServeConfig(batch_invariant=True)) is True


def test_speculative_is_a_setting_checked_wherever_it_comes_from(tmp_path, monkeypatch,
                                                                 capsys):
    from parlance.cli.wiring import speculative_settings

    assert ServeConfig().speculative is None
    assert _serve_parser().parse_args(["--speculative", "ngram"]).speculative == "ngram"
    assert speculative_settings(ServeConfig(speculative="ngram")).enabled is True
    assert speculative_settings(ServeConfig(speculative="off")).enabled is False
    # unset: n-gram drafts wherever the attention that keeps their answers is on
    assert speculative_settings(ServeConfig(batch_invariant=True)).mode == "ngram"
    assert speculative_settings(ServeConfig(batch_invariant=False)).mode == "off"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PARLANCE_SPECULATIVE", "eagle")
    assert main(["serve", "--model", "smollm2"]) == 2  # refused before any load
    assert "speculative must be one of ngram, draft, off" in capsys.readouterr().err


def test_the_draft_model_goes_to_the_loader_with_the_model_it_drafts_for(tmp_path, monkeypatch,
                                                                         capsys):
    """Planned with the model (its memory counted), or refused before any load when its
    file is not there."""
    from parlance.models.registry import BUILTIN

    monkeypatch.chdir(tmp_path)
    loads = []

    def loader(spec, plan, on_progress):
        loads.append((spec, plan))
        raise ValueError("not loading anything in this test")

    monkeypatch.setattr(parlance.cli.wiring, "engine_loader", lambda config: loader)
    assert main(["serve", "--draft-model", str(tmp_path / "missing.gguf")]) == 2
    err = capsys.readouterr().err
    assert "missing.gguf" in err and "--draft-model" in err
    assert loads == []
    draft = BUILTIN[0].locate()
    assert main(["serve", "--draft-model", str(draft)]) == 2
    [(spec, plan)] = loads
    assert spec.draft is not None and spec.draft.locate() == draft
    assert plan.memory.draft is not None and plan.memory.draft.weights == draft.stat().st_size


def test_a_command_without_its_handler_is_refused_and_never_serves(monkeypatch, capsys):
    """One dispatcher: a subcommand whose parser names nothing to run exits 2 saying so,
    where a forgotten branch once fell through to starting the server."""
    import parlance.cli.dispatch

    full = parlance.cli.dispatch.build_parser

    def with_a_new_command() -> argparse.ArgumentParser:
        parser = full()
        commands = next(a for a in parser._actions
                        if isinstance(a, argparse._SubParsersAction))
        commands.add_parser("stop", help="a command added without set_defaults(run=...)")
        return parser

    def never(*args: object) -> None:
        raise AssertionError("the server was started")

    monkeypatch.setattr(parlance.cli.dispatch, "build_parser", with_a_new_command)
    monkeypatch.setattr(parlance.cli.wiring, "build_app", never)
    with pytest.raises(SystemExit) as exited:
        main(["stop"])
    assert exited.value.code == 2
    assert "'stop' has nothing to run it" in capsys.readouterr().err


def test_every_command_names_what_runs_it():
    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction))
    assert set(commands.choices) == {"serve", "models", "chat", "run", "ps", "load", "unload",
                                     "pull", "show", "rm", "cp"}
    for name, sub in commands.choices.items():
        assert callable(sub.get_default("run")), name
        if name not in ("serve", "chat", "run"):  # what each asks of a server (models: --url)
            assert callable(sub.get_default("ask")), name


def test_serve_with_a_data_dir_it_cannot_write_says_so_in_one_line(tmp_path, monkeypatch,
                                                                    capsys):
    """Issue 39: a read-only --data-dir ended `serve` with a traceback. (A gateway, so
    nothing loads first; the data directory goes through a file.)"""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("")
    assert main(["serve", "--upstream", "http://127.0.0.1:9", "--data-dir",
                 str(tmp_path / "file" / "data")]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert "cannot open the response store" in captured.out + captured.err
