"""`parlance chat` with no --url: it starts the default model (SmolLM2 on llama.cpp) in a
server of its own on a free loopback port. Contracts only: an answer streams, Ctrl-C
stops it and the prompt comes back, the chat goes on, /exit leaves with status 0."""

from __future__ import annotations

import pexpect
import pytest

from tests.support.console_server import interrupt_at_prompt, spawn

pytestmark = pytest.mark.model

PROMPT = ">>> "
# long enough that the first streamed words come well before its end
STORY = "Write a long story about a dragon and a knight, at least 800 words."


def test_the_in_process_default_model_streams_and_stops(tmp_path):
    child = spawn(tmp_path, "chat")
    try:
        child.expect_exact("smollm2-135m-instruct in")  # loaded as `serve` would
        child.expect_exact(PROMPT)
        child.sendline(STORY)
        child.expect_exact(STORY)  # the terminal's echo of the line, not the answer yet
        child.expect(r"[A-Za-z]{3,}")  # words of the answer, as they stream
        child.sendintr()
        child.expect_exact("stopped")
        child.expect_exact(PROMPT)
        child.sendline("Say hello.")  # the chat goes on (how long SmolLM2 talks is its own)
        child.expect_exact("Say hello.")
        child.expect(r"tokens/s|[A-Za-z]{3,}")
        child.sendintr()
        child.expect(r"tokens/s|stopped")  # the answer's figures: it ended, or was stopped
        child.expect_exact(PROMPT)
        # (had that Ctrl-C come as the prompt was being drawn, readline would hold it
        # to the next Enter: one sent while it waits takes both)
        interrupt_at_prompt(child)
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
