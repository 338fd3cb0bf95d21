"""opencode (npm `opencode-ai`) runs `opencode run` non-interactively with a custom
OpenAI-compatible provider (`@ai-sdk/openai-compatible`, which opencode installs from
npm on first use) pointed at Parlance, asked to create `hello.txt` containing `hi`.

Against the fake engine, scripted to call opencode's `write` tool and then answer:
opencode's first request is its system prompt and 10 tool schemas, 7.5k tokens of
SmolLM2's vocabulary (measured: 2.2k of messages, 5.3k of schemas), which take half a
minute to evaluate on a quiet 2-core machine and several minutes on a busy one (its
title request beside it is 0.6k), and SmolLM2 does not write the file when it gets
there. What this tests is the protocol: every request answered 2xx, the
streamed call parsed and run by opencode (the file exists), the turn finished."""

from __future__ import annotations

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

OPENCODE_VERSION = "1.18.33"
RUN_TIMEOUT = 900


def opencode_config(base_url: str) -> str:
    return f"""{{
  "$schema": "https://opencode.ai/config.json",
  "model": "parlance/fake-model",
  "small_model": "parlance/fake-model",
  "provider": {{
    "parlance": {{
      "npm": "@ai-sdk/openai-compatible",
      "name": "Parlance",
      "options": {{"baseURL": "{base_url}/v1", "apiKey": "unused"}},
      "models": {{"fake-model": {{"name": "Parlance model", "tool_call": true}}}}
    }}
  }}
}}
"""


@pytest.fixture(scope="module")
def opencode() -> Path:
    return npm_bin("opencode-ai", OPENCODE_VERSION, "opencode")


def test_opencode_run_writes_a_file_through_parlance(opencode, agent_dirs):
    home, work = agent_dirs
    with agent_server(work, frozenset({"write"})) as (server, model, access):
        (work / "opencode.json").write_text(opencode_config(server.base_url))
        # a clean environment: with the test runner's, opencode did not find its model
        env = {"PATH": os.environ["PATH"], "HOME": str(home),
               "XDG_CONFIG_HOME": str(home / ".config"),
               "XDG_DATA_HOME": str(home / ".local/share"), "XDG_CACHE_HOME": str(home / ".cache"),
               "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
               "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}
        run = subprocess.run(
            [str(opencode), "run", "-m", "parlance/fake-model", "--auto", "--format", "json",
             f"Create {FILE_NAME} containing {FILE_TEXT}"],
            cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=RUN_TIMEOUT)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert '"type":"error"' not in run.stdout.replace(" ", ""), run.stdout[-3000:]
    assert_protocol_held(access, {"/v1/chat/completions"})
    assert model.calls_made >= 1
    assert (work / FILE_NAME).read_text().strip() == FILE_TEXT, run.stdout[-3000:]
