"""`parlance load`: the model's load progress as the server reports it (the load asked
for as a stream), a bar on a terminal (driven in a pseudo-terminal) and plain lines
otherwise; against the fake engine with a loader held half way, and against SmolLM2
loaded by a real `parlance serve`."""

from __future__ import annotations

import pexpect
import pytest

from parlance.cli import main
from parlance.models.registry import DEFAULT_MODEL
from tests.support.console_server import fake_server, spawn
from tests.support.serve_process import serve


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.delenv("PARLANCE_URL", raising=False)
    monkeypatch.delenv("PARLANCE_API_KEY", raising=False)
    with fake_server(tmp_path) as running:
        yield running


def test_the_bar_follows_the_load_on_the_server(tmp_path, server):
    server.loader.gate.clear()  # the load holds half way until the bar was seen there
    child = spawn(tmp_path, "load", "acme/cold-model", "--url", server.url)
    try:
        child.expect_exact("Loading")
        child.expect_exact("acme/cold-model")
        assert server.loader.halfway.wait(60)
        child.expect_exact("40%")  # the last report before the loader's hold
        assert "acme/cold-model" not in [m.spec.id for m in server.models]
        server.loader.gate.set()
        child.expect_exact("100%")
        child.expect_exact("Loaded")
        child.expect_exact("acme/cold-model in")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    assert server.loader.loaded == ["acme/cold-model"]


def test_without_a_terminal_it_says_each_quarter(server, capsys):
    assert main(["load", "acme/cold-model", "--url", server.url]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("Loading acme/cold-model")]
    assert [line.split(": ")[1].split(" ")[0] for line in lines] == [
        "0%", "25%", "50%", "75%", "100%"]
    assert "Loaded acme/cold-model" in err and "\x1b[" not in err


@pytest.mark.model
def test_smollm2_loads_with_a_bar(tmp_path, monkeypatch):
    monkeypatch.delenv("PARLANCE_API_KEY", raising=False)
    with serve(tmp_path) as running:
        assert main(["unload", DEFAULT_MODEL, "--url", running.base_url]) == 0
        child = spawn(tmp_path, "load", DEFAULT_MODEL, "--url", running.base_url)
        try:
            child.expect_exact("Loading")
            child.expect_exact("━")
            child.expect_exact("100%")
            child.expect_exact("Loaded")
            child.expect_exact(f"{DEFAULT_MODEL} in")
            child.expect(pexpect.EOF)
        finally:
            child.close()
        assert child.exitstatus == 0
        assert main(["ps", "--url", running.base_url]) == 0
