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


REPO = ["README.md", "Tiny-Q4_K_M.gguf", "Tiny-Q8_0.gguf", "mmproj-Tiny-f16.gguf"]


@pytest.fixture
def catalog(tmp_path, monkeypatch):
    """A running server whose catalog is a loopback origin with Hugging Face's API."""
    from tests.support.catalog_origin import CatalogOrigin

    monkeypatch.delenv("PARLANCE_URL", raising=False)
    with CatalogOrigin({"acme/Tiny-GGUF": REPO}, tmp_path) as origin, \
            fake_server(tmp_path, catalog_url=origin.base_url) as server:
        yield server, origin


@pytest.mark.parametrize(("name", "file"), [
    ("acme/Tiny-GGUF", "Tiny-Q4_K_M.gguf"),
    ("hf.co/acme/Tiny-GGUF:q8_0", "Tiny-Q8_0.gguf"),
])
def test_a_catalog_name_is_resolved_to_its_file(tmp_path, catalog, name, file):
    server, origin = catalog
    child = spawn(tmp_path, "pull", name, "--url", server.url)
    child.expect("Pulled")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (server.models_dir / "acme" / "Tiny-GGUF" / file).read_bytes() == origin.data
    assert origin.asked == ["/api/models/acme/Tiny-GGUF",
                            f"/acme/Tiny-GGUF/resolve/main/{file}"]


def test_a_catalog_name_that_fits_no_file_says_what_there_is(tmp_path, catalog):
    server, _ = catalog
    child = spawn(tmp_path, "pull", "acme/Tiny-GGUF:Q5_K_M", "--url", server.url)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    assert "no Q5_K_M GGUF; it has Q4_K_M, Q8_0" in child.before.replace("\r\n", "")
    child = spawn(tmp_path, "pull", "acme/Nothing", "--url", server.url)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1 and "no repository acme/Nothing" in child.before


def test_a_catalog_that_does_not_answer_is_one_line(tmp_path, monkeypatch):
    import socket

    monkeypatch.delenv("PARLANCE_URL", raising=False)
    with socket.socket() as nothing:
        nothing.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{nothing.getsockname()[1]}"
    with fake_server(tmp_path, catalog_url=dead) as server:
        child = spawn(tmp_path, "pull", "acme/Tiny-GGUF", "--url", server.url)
        child.expect(pexpect.EOF)
        child.close()
    assert child.exitstatus == 1
    assert f"The model catalog {dead} could not be reached" in child.before.replace("\r\n", "")


def test_lm_studios_download_takes_a_catalog_name_and_its_quantization(catalog):
    """The web chat's download field and LM Studio clients (`/api/v1/models/download`
    with `quantization`) reach the same catalog as `pull`."""
    import time

    import httpx

    server, origin = catalog
    started = httpx.post(f"{server.url}/api/v1/models/download",
                         json={"model": "acme/Tiny-GGUF", "quantization": "Q8_0"}).json()
    status = started
    deadline = time.monotonic() + 120  # a bound, so a broken test ends; nothing is timed
    while status["status"] not in ("completed", "failed", "already_downloaded"):
        assert time.monotonic() < deadline, status
        time.sleep(0.05)
        status = httpx.get(f"{server.url}/api/v1/models/download/status/"
                           f"{started['job_id']}").json()
    assert status["status"] in ("completed", "already_downloaded"), status
    assert (server.models_dir / "acme" / "Tiny-GGUF" / "Tiny-Q8_0.gguf").read_bytes() == \
        origin.data
    refused = httpx.post(f"{server.url}/api/v1/models/download", json={"model": "not a name"})
    assert refused.status_code == 400 and "catalog name" in refused.text
