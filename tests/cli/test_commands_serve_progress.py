"""`parlance serve` shows the model's load progress: a bar on a terminal (driven in a
pseudo-terminal), plain lines when its output is a file."""

from __future__ import annotations

import contextlib
import time

import httpx
import pexpect
import pytest

from tests.support.console_server import spawn
from tests.support.serve_process import STARTUP_SECONDS, free_port, serve

pytestmark = pytest.mark.model


def answering(url: str) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=5).status_code == 200:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing answered {url}")


def test_plain_lines_without_a_terminal(tmp_path):
    with serve(tmp_path) as server:
        output = server.output()
    lines = [line for line in output.splitlines() if line.startswith("Loading ")]
    assert lines and lines[-1].startswith("Loading smollm2-135m-instruct: 100%")
    assert "\x1b[" not in output


def test_a_bar_on_a_terminal(tmp_path):
    port = free_port()
    child = spawn(tmp_path, "serve", "--port", str(port), "--data-dir", str(tmp_path / "data"))
    try:
        child.expect_exact("Loading")
        child.expect_exact("━")
        child.expect_exact("100%")
        child.expect_exact("Serving on")
        answering(f"http://127.0.0.1:{port}/health")  # (its signal handlers are set)
        child.sendintr()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
