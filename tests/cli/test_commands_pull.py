"""`parlance pull`: a download into a running server's models directory, its progress a
bar with bytes, speed and ETA on a terminal (driven in a pseudo-terminal), against a
loopback origin the server is allowed to reach."""

from __future__ import annotations

import pexpect
import pytest

from parlance.cli import main
from tests.support.console_server import fake_server, spawn
from tests.support.model_origin import DATA, HALF, OriginServer


@pytest.fixture
def servers(tmp_path, monkeypatch):
    monkeypatch.delenv("PARLANCE_URL", raising=False)
    monkeypatch.delenv("PARLANCE_API_KEY", raising=False)
    with fake_server(tmp_path) as server, OriginServer() as origin:
        yield server, origin


def test_the_bar_shows_bytes_as_they_arrive(tmp_path, servers):
    server, origin = servers
    child = spawn(tmp_path, "pull", f"{origin.base_url}/gated/tiny.gguf", "--url", server.url)
    try:
        # the origin holds the second half until its gate opens: the bar shows the first
        child.expect_exact(f"{HALF / 1000:.1f}/{len(DATA) / 1000:.1f} kB")
        origin.app.state.origin.gate.set()
        child.expect_exact(f"{len(DATA) / 1000:.1f}/{len(DATA) / 1000:.1f} kB")
        child.expect("/s")  # its speed
        child.expect("Pulled")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    assert (server.models_dir / "127.0.0.1" / "tiny.gguf").read_bytes() == DATA


def test_without_a_terminal_it_says_each_step(servers, capsys):
    server, origin = servers
    assert main(["pull", f"{origin.base_url}/plain/tiny.gguf", "--url", server.url]) == 0
    err = capsys.readouterr().err
    assert "pulled tiny.gguf as 127.0.0.1/tiny" in err and "Pulled" in err
    assert main(["pull", "fake-model", "--url", server.url]) == 0  # served already


def test_a_failed_pull_is_one_line_and_status_1(servers, capsys):
    server, origin = servers
    for name in (f"{origin.base_url}/missing/gone.gguf",  # refused before any line
                 "llama3.2"):  # a name of Ollama's registry
        assert main(["pull", name, "--url", server.url]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, err
