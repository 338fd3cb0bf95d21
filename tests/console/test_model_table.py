"""`console.model_table`: `parlance models` and `models --url` print one table: the same
context for the same file, and ids whole at 80 columns."""

from __future__ import annotations

from rich.console import Console

from parlance.cli import main
from parlance.console.model_table import ModelRow, model_table
from tests.support.console_server import fake_server


def test_ids_are_never_wrapped_at_80_columns():
    ids = ["bartowski/Meta-Llama-3.1-8B-Instruct-GGUF", "unsloth/Qwen3-30B-A3B-Instruct-2507",
           "acme/x"]
    console = Console(width=80, record=True, force_terminal=False)
    console.print(model_table([ModelRow(i, 4_920_000_000, 131072, "Q4_K_M", loaded=True)
                               for i in ids]))
    shown = console.export_text()
    assert all(i in shown for i in ids)
    assert max(len(line) for line in shown.splitlines()) <= 80


def test_the_registry_and_a_server_agree_on_a_files_context(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PARLANCE_URL", raising=False)
    monkeypatch.delenv("PARLANCE_API_KEY", raising=False)
    with fake_server(tmp_path) as server:  # acme/cold-model: specs/tiny.gguf
        monkeypatch.chdir(tmp_path)
        (tmp_path / "parlance.toml").write_text(
            '[presets.tiny]\nmodel = "specs/tiny.gguf"\n')
        assert main(["models"]) == 0
        local = capsys.readouterr().out
        assert main(["models", "--url", server.url]) == 0
        remote = capsys.readouterr().out
    row = next(line for line in local.splitlines() if " tiny " in line)
    served = next(line for line in remote.splitlines() if "acme/cold-model" in line)
    assert "4096" in row and "4096" in served  # (its header's llama.context_length)
    for shown in (local, remote):  # the same columns
        header = shown.splitlines()[1]
        assert [header.index(c) < header.index(n) for c, n in
                (("id", "loaded"), ("loaded", "size"), ("size", "context"))] == [True] * 3
