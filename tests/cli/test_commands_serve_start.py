"""How `parlance serve` starts (issue 40 item 12): the port is bound before anything
else, so a port in use is one error line and no claim of serving; once it accepts
connections it names the web chat, the API docs and each API's base URL."""

from __future__ import annotations

import re
import socket

import httpx
import pexpect

from tests.support.console_server import spawn


def test_a_port_in_use_is_one_clear_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        child = spawn(tmp_path, "serve", "--port", str(port),
                      "--data-dir", str(tmp_path / "data"))
        child.expect(pexpect.EOF)
        child.close()
    shown = re.sub(r"\x1b\[[0-9;]*m", "", child.before)
    assert child.exitstatus == 2 and len(shown.strip().splitlines()) == 1, shown
    assert f"error: cannot listen on 127.0.0.1:{port}" in shown and "in use" in shown
    assert "Serving" not in shown and "Loading" not in shown and "Traceback" not in shown


def test_the_startup_lines_come_after_the_bind_and_name_where_to_go(tmp_path):
    with socket.socket() as nothing:  # an upstream that is not there: no model loads
        nothing.bind(("127.0.0.1", 0))
        upstream = f"http://127.0.0.1:{nothing.getsockname()[1]}"
    child = spawn(tmp_path, "serve", "--port", "0", "--upstream", upstream,
                  "--data-dir", str(tmp_path / "data"))
    try:
        child.expect(r"Serving on (http://127\.0\.0\.1:\d+)")
        base = child.match.group(1)
        child.expect_exact("  Models")
        shown = re.sub(r"\x1b\[[0-9;]*m", "", child.before)
        assert f"Web chat   {base}/" in shown and f"API docs   {base}/docs" in shown
        assert f"OpenAI {base}/v1" in shown and f"LM Studio {base}/api/v1" in shown
        # said once it accepts connections: the page and the docs are there
        assert httpx.get(f"{base}/docs", timeout=30).status_code == 200
        assert httpx.get(f"{base}/", timeout=30, headers={"accept": "text/html"}
                         ).status_code == 200
        child.sendintr()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
