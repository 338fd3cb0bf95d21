"""Qwen Code (npm `@qwen-code/qwen-code`) runs one non-interactive turn (`qwen --yolo
-o json "…"`) with its OpenAI auth type pointed at Parlance (`OPENAI_BASE_URL`,
`OPENAI_API_KEY`, `OPENAI_MODEL`), asked to create `hello.txt` containing `hi`.

Against the fake engine, scripted to call Qwen Code's `write_file` tool and then answer:
its first request is 18.2k tokens of SmolLM2's vocabulary (measured: 8.7k of system
prompt and messages, 9.5k of 14 tool schemas), over a minute of prompt evaluation on a
quiet 2-core machine and far beyond the 240 s after which Qwen Code abandons a stream
without a `data:` line on a busy one. What this tests is the protocol: every request
answered 2xx, the streamed call parsed and run (the file exists), the turn a success.
The package asks for Node 22; it runs on the Node 20 this suite has."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.npm import npm_bin
from tests.support.scripted_agent import (
    FILE_NAME,
    FILE_TEXT,
    agent_server,
    assert_protocol_held,
)

pytestmark = [pytest.mark.clients]

QWEN_CODE_VERSION = "0.24.4"
RUN_TIMEOUT = 900


@pytest.fixture(scope="module")
def qwen() -> Path:
    return npm_bin("@qwen-code/qwen-code", QWEN_CODE_VERSION, "qwen")


def test_qwen_code_writes_a_file_through_parlance(qwen, agent_dirs):
    home, work = agent_dirs
    with agent_server(work, frozenset({"write_file"})) as (server, model, access):
        env = {**os.environ, "HOME": str(home), "OPENAI_BASE_URL": f"{server.base_url}/v1",
               "OPENAI_API_KEY": "unused", "OPENAI_MODEL": "fake-model",
               "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"}
        run = subprocess.run(
            [str(qwen), "--auth-type", "openai", "--yolo", "-o", "json",
             f"Create {FILE_NAME} containing {FILE_TEXT}"],
            cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=RUN_TIMEOUT)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    result = json.loads(run.stdout)[-1]
    assert result["type"] == "result" and not result["is_error"], result
    assert_protocol_held(access, {"/v1/chat/completions"})
    assert model.calls_made >= 1
    assert (work / FILE_NAME).read_text().strip() == FILE_TEXT, run.stdout[-3000:]
