"""`parlance ps`, `load`, `unload`, `models --url` against a running server (the fake
engine behind real uvicorn): what they show, and a clear one-line error with exit status
1 when no server answers, the key is wrong or the model is unknown."""

from __future__ import annotations

import pytest

from parlance.cli import main
from tests.support.console_server import fake_server
from tests.support.serve_process import free_port


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
                 ["chat"]):
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
