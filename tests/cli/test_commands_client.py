"""`parlance ps`, `load`, `unload`, `models --url` against a running server (the fake
engine behind real uvicorn): what they show, and a clear one-line error with exit status
1 when no server answers, the key is wrong or the model is unknown. `load` shows the
load's progress as the server reports it (the load asked for as a stream): a bar on a
terminal (driven in a pseudo-terminal, the fake loader held half way), plain lines
otherwise; and SmolLM2 loaded by a real `parlance serve`."""

from __future__ import annotations

import pexpect
import pytest

from parlance.cli import main
from parlance.models.registry import DEFAULT_MODEL
from tests.support.console_server import fake_server, spawn
from tests.support.serve_process import free_port, serve


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.delenv("PARLANCE_URL", raising=False)
    monkeypatch.delenv("PARLANCE_API_KEY", raising=False)
    with fake_server(tmp_path) as running:
        yield running


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_load_ps_unload_round_trip(server, capsys):
    status, out, _ = run(capsys, "ps", "--url", server.url)
    assert status == 0 and "fake-model" in out and "acme/cold-model" not in out
    status, _, err = run(capsys, "load", "acme/cold-model", "--context-length", "1024",
                         "--url", server.url)
    assert status == 0 and "Loaded acme/cold-model" in err and "context 1024" in err
    assert server.loader.loaded == ["acme/cold-model"]
    status, out, _ = run(capsys, "ps", "--url", server.url)
    assert status == 0 and "acme/cold-model" in out and "1024" in out
    assert ":latest" not in out  # the names `unload` takes
    status, _, err = run(capsys, "unload", "acme/cold-model", "--url", server.url)
    assert status == 0 and "Unloaded acme/cold-model" in err
    assert [m.spec.id for m in server.models] == ["fake-model"]


def test_models_with_a_url_lists_the_servers_models(server, capsys, monkeypatch):
    status, out, _ = run(capsys, "models", "--url", server.url)
    assert status == 0
    rows = [line for line in out.splitlines() if "fake-model" in line or "cold-model" in line]
    assert len(rows) == 2 and "yes" in rows[0] and "yes" not in rows[1]
    monkeypatch.setenv("PARLANCE_URL", server.url)  # the environment names it too
    status, again, _ = run(capsys, "models")
    assert status == 0 and again == out


def test_an_unknown_model_is_one_line_and_status_1(server, capsys):
    for command in ("load", "unload"):
        status, out, err = run(capsys, command, "no-such-model", "--url", server.url)
        assert status == 1 and out == ""
        assert err.startswith("error: ") and "no-such-model" in err and "404" in err
        assert err.count("\n") == 1, err


def test_no_server_is_one_line_and_status_1(capsys, monkeypatch):
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("PARLANCE_URL", url)
    for argv in (["ps"], ["load", "m"], ["unload", "m"], ["pull", "m"], ["models"],
                 ["show", "m"], ["rm", "m"], ["cp", "m", "n"], ["chat", "--url", url],
                 ["run", "m", "hi", "--url", url]):  # (chat: no other server when named)
        status, _, err = run(capsys, *argv)
        assert status == 1, argv
        assert f"no Parlance server answers at {url}" in err and err.count("\n") == 1, err


def test_a_wrong_or_missing_key_is_said_as_such(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PARLANCE_URL", raising=False)
    monkeypatch.delenv("PARLANCE_API_KEY", raising=False)
    with fake_server(tmp_path, api_keys=("sekrit",)) as server:
        for key in ((), ("--api-key", "wrong")):
            status, _, err = run(capsys, "ps", "--url", server.url, *key)
            assert status == 1 and "needs a valid API key" in err and "--api-key" in err
        assert run(capsys, "ps", "--url", server.url, "--api-key", "sekrit")[0] == 0
        monkeypatch.setenv("PARLANCE_API_KEY", "sekrit")
        assert run(capsys, "ps", "--url", server.url)[0] == 0


def test_models_without_a_url_still_lists_this_machines_registry(tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.delenv("PARLANCE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    status, out, _ = run(capsys, "models")
    assert status == 0 and "smollm2-135m-instruct" in out


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
