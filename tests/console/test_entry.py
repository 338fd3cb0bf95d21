"""The client commands `parlance` adds (issue 40 item 9), each run as a user runs it: in
a pseudo-terminal, or with its input or output a pipe: `run` (one question, or a chat),
answer-only output, `chat` finding the running server through PARLANCE_URL, a model
the server has not refused with the list, `show`, `cp`, `rm`, `--version`."""

from __future__ import annotations

import socket
import subprocess
import sys

import pexpect
import pytest

from parlance import __version__
from parlance.core.events import Finish, FinishReason, Usage
from parlance.engines.fake import Generated
from tests.support.console_server import ROOT, conversation, fake_server, spawn
from tests.support.live_server import STARTUP

PROMPT = ">>> "


@pytest.fixture
def server(tmp_path):
    with fake_server(tmp_path) as running:
        yield running


def finished(child: pexpect.spawn) -> tuple[str, int]:
    child.expect(pexpect.EOF)
    child.close()
    return child.before, child.exitstatus


def piped(tmp_path, *args: str, given: str = "", **env: str) -> subprocess.CompletedProcess:
    """`parlance ARGS` with its input and output pipes (no terminal at all)."""
    import os

    environ = {k: v for k, v in os.environ.items()
               if k not in ("PARLANCE_URL", "PARLANCE_API_KEY", "PARLANCE_DATA_DIR")}
    environ.update({"PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
                    "XDG_DATA_HOME": str(tmp_path / "xdg"), **env})
    return subprocess.run([sys.executable, "-m", "parlance", *args], input=given,
                          capture_output=True, text=True, env=environ, timeout=STARTUP)


def test_version():
    shown, status = finished(pexpect.spawn(sys.executable, ["-m", "parlance", "--version"],
                                           encoding="utf-8", env={"PYTHONPATH": str(ROOT / "src")}))
    assert status == 0 and shown.strip() == f"parlance {__version__}"


def test_run_asks_once_on_a_terminal(tmp_path, server):
    server.engine.enqueue(Generated("The **answer**."), Finish(FinishReason.STOP), Usage(3, 3))
    shown, status = finished(spawn(tmp_path, "run", "fake-model", "what", "now?",
                                   "--url", server.url))
    assert status == 0 and "answer" in shown and "**" not in shown and PROMPT not in shown
    assert conversation(server.engine) == [("user", "what now?")]


def test_piped_input_and_output_get_the_answer_text_only(tmp_path, server):
    server.engine.enqueue(Generated("<think>hmm</think>Plain **text**\x1b]0;t\x07."),
                          Finish(FinishReason.STOP), Usage(3, 3))
    done = piped(tmp_path, "run", "fake-model", "and this", "--url", server.url,
                 given="a question\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Plain **text**]0;t.\n"  # (no reasoning, figures nor controls)
    assert conversation(server.engine) == [("user", "a question\n\nand this")]
    done = piped(tmp_path, "chat", "--url", server.url, given="from a pipe\n")
    assert done.returncode == 0 and done.stdout == "Hello there!\n"
    assert conversation(server.engine) == [("user", "from a pipe")]


def test_an_answer_that_fails_in_a_pipe_is_said_on_stderr(tmp_path, server):
    done = piped(tmp_path, "run", "no-such-model", "hi", "--url", server.url)
    assert done.returncode == 1 and done.stdout == ""
    assert "no-such-model" in done.stderr and "fake-model" in done.stderr  # (the list)


def test_run_without_a_prompt_is_a_chat_with_that_model(tmp_path, server):
    child = spawn(tmp_path, "run", "acme/cold-model", "--url", server.url)
    child.expect_exact(PROMPT)
    child.sendline("hi")
    child.expect_exact("Hello there!")
    child.expect_exact(PROMPT)
    assert server.loader.loaded == ["acme/cold-model"]
    child.sendeof()
    assert finished(child)[1] == 0


def test_chat_uses_the_server_at_parlance_url(tmp_path, server):
    child = spawn(tmp_path, "chat", PARLANCE_URL=server.url)
    child.expect_exact(f"at {server.url}")
    child.expect_exact(PROMPT)
    child.sendline("hello")
    child.expect_exact("Hello there!")
    child.expect_exact(PROMPT)
    assert conversation(server.engine) == [("user", "hello")]
    child.sendeof()
    assert finished(child)[1] == 0


def test_an_explicit_url_with_no_server_is_an_error_not_a_new_server(tmp_path):
    shown, status = finished(spawn(tmp_path, "run", "m", "hi", "--url", dead_url()))
    assert status == 1 and "no Parlance server answers" in shown


@pytest.mark.model
def test_chat_starts_its_own_server_when_none_answers(tmp_path):
    child = spawn(tmp_path, "chat", PARLANCE_URL=dead_url())
    child.expect_exact("starting one in this process")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    assert finished(child)[1] == 0


def dead_url() -> str:
    """A loopback URL where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_show_cp_rm(tmp_path, server):
    shown, status = finished(spawn(tmp_path, "show", "fake-model", "--url", server.url))
    assert status == 0 and "Model" in shown and "Capabilities" in shown
    assert "completion" in shown
    shown, status = finished(spawn(tmp_path, "cp", "fake-model", "my-copy",
                                   "--url", server.url))
    assert status == 0 and "copied 'fake-model' to 'my-copy'" in shown
    assert finished(spawn(tmp_path, "show", "my-copy", "--url", server.url))[1] == 0
    shown, status = finished(spawn(tmp_path, "rm", "my-copy", "--url", server.url))
    assert status == 0 and "deleted 'my-copy'" in shown
    shown, status = finished(spawn(tmp_path, "show", "my-copy", "--url", server.url))
    assert status == 1 and "error:" in shown and "not found" in shown
    shown, status = finished(spawn(tmp_path, "rm", "nope", "--url", server.url))
    assert status == 1 and "error:" in shown
