"""`parlance serve`'s flags come from the `ServeConfig` fields: every setting says what it
does, its default and its env var; and a new setting is one field, whose flag, env var,
`[serve]` key, help and flag-reference row all follow from it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from parlance.cli.reference import FlagRow, flag_rows, flags_markdown
from parlance.cli.serve_flags import add_serve_flags, serve_flags
from parlance.config import SERVE_DEFAULTS, ServeConfig, resolve_config, setting


@dataclass(frozen=True, slots=True)
class WithNewSetting(ServeConfig):
    """The settings a developer gets by adding one field (made up by this test)."""

    greeting_words: int = setting(12, "words the server greets a new client with")


def _parser(config: type[ServeConfig]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parlance serve")
    add_serve_flags(parser, config)
    return parser


def _action(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    return next(a for a in parser._actions if flag in a.option_strings)


def test_a_new_setting_is_one_field(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (no ./parlance.toml)
    parser = _parser(WithNewSetting)
    action = _action(parser, "--greeting-words")
    assert action.dest == "greeting_words" and action.type is int
    assert action.help == ("words the server greets a new client with "
                           "[default 12; env PARLANCE_GREETING_WORDS]")
    assert "--greeting-words GREETING_WORDS" in parser.format_help()
    flags = vars(parser.parse_args(["--greeting-words", "3"]))
    assert resolve_config(flags, {}, None, WithNewSetting)[0].greeting_words == 3
    by_env, _ = resolve_config({}, {"PARLANCE_GREETING_WORDS": "5"}, None, WithNewSetting)
    assert by_env.greeting_words == 5
    file = tmp_path / "settings.toml"
    file.write_text("[serve]\ngreeting_words = 7\n")
    assert resolve_config({}, {}, file, WithNewSetting)[0].greeting_words == 7
    assert resolve_config({}, {}, None, WithNewSetting)[0].greeting_words == 12
    assert FlagRow("--greeting-words", "PARLANCE_GREETING_WORDS", "12",
                   "words the server greets a new client with") in list(
        flag_rows(WithNewSetting))
    assert ("| `--greeting-words` | `PARLANCE_GREETING_WORDS` | `12` | words the server "
            "greets a new client with |") in flags_markdown(WithNewSetting)
    # and the real command is untouched by a subclass
    assert "greeting_words" not in {f.name for f in serve_flags()}


def test_a_value_of_the_wrong_type_is_refused_naming_its_source(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (no ./parlance.toml)
    with pytest.raises(ValueError, match="^PARLANCE_GREETING_WORDS: greeting_words must be "
                                         "int, not 'many'$"):
        resolve_config({}, {"PARLANCE_GREETING_WORDS": "many"}, None, WithNewSetting)


def test_every_setting_but_the_file_only_ones_is_a_flag_with_a_row():
    flags = {f.name for f in serve_flags()}
    assert flags == set(SERVE_DEFAULTS) - {"upstreams", "local_model"}
    rows = list(flag_rows())
    assert len(rows) == len(flags)
    [switch] = [r for r in rows if r.flag.startswith("--batch-invariant")]
    assert switch.flag == "--batch-invariant / --no-batch-invariant"
    assert "--no-batch-invariant: llama.cpp's own attention kernels" in switch.help
    assert [r.default for r in rows if r.flag == "--keepalive-seconds"] == ["10"]
    assert [r.default for r in rows if r.flag == "--kv-unified"] == ["off"]
    table = flags_markdown()
    assert table.count("\n") == len(rows) + 2 and "'claude-\\*'" in table
