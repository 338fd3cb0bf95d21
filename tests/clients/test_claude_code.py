"""Anthropic's Claude Code (npm `@anthropic-ai/claude-code`) runs a turn against
Parlance's `/v1/messages`: the turn completes with no API error and no retry, and its
request is answered 200.

Claude Code runs in its own minimal mode, `--bare` (what scripts and the Agent SDK use):
the request has the default's shape (a three-block `system` with `cache_control`,
`<system-reminder>` blocks, the Bash, Edit and Read tools with draft 2020-12 schemas,
adaptive thinking, `output_config.effort`, `context_management`, `metadata`,
`max_tokens` 64000, streamed, `?beta=true`) in 1,200 tokens. The default mode is the
same wire format with all 24 tools and a 5.5k-character system prompt: 20,400 tokens,
whose prefill took 34 minutes on two cores shared with other work, after which SmolLM2
(135M parameters, trained on 8k) decoded at ~0.4 tokens/s and never ended its answer;
with only 4 tools (4,100 tokens) it still talked until `max_tokens`, which Claude Code
reports as an error after retrying. In `--bare` mode SmolLM2 answers and stops.

The operator's preset makes SmolLM2 greedy (Claude Code sends no sampling settings), so
the run is reproducible. The server has a 32k context, beyond the 8k SmolLM2 was
trained on: llama.cpp applies the model's own RoPE settings, as llama-server does.
`CLAUDE_STREAM_IDLE_TIMEOUT_MS` is Claude Code's own setting for slow local models: its
watchdog ends a stream that sends no content for 5 minutes (it ignores `ping`)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_clients import CLAUDE_CODE_VERSION, TURN_TIMEOUT, claude_env
from tests.support.npm import npm_bin
from tests.support.serve_process import ServeProcess, serve

pytestmark = [pytest.mark.clients, pytest.mark.model]

PRESET = """\
[presets.claude]
model = "smollm2-135m-instruct"
aliases = ["claude-*"]
sampling = { temperature = 0 }
"""


@pytest.fixture(scope="module")
def claude() -> Path:
    return npm_bin("@anthropic-ai/claude-code", CLAUDE_CODE_VERSION, "claude")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    tmp = tmp_path_factory.mktemp("claude-server")
    (tmp / "parlance.toml").write_text(PRESET)
    with serve(tmp, "--config", str(tmp / "parlance.toml"), "--model", "claude",
               "--ctx-size", "32768", "--parallel", "1",
               "--request-timeout", str(TURN_TIMEOUT)) as running:
        yield running


def test_claude_print_completes_a_turn(claude, server, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    run = subprocess.run(
        [str(claude), "--bare", "-p", "Say hello in one short sentence.",
         "--output-format", "json"],
        cwd=work, env=claude_env(server.base_url, home), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=TURN_TIMEOUT + 300)
    log = server.output()
    statuses = re.findall(r"method=POST path=/v1/messages status=(\d+)", log)
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:], log[-3000:])
    result = json.loads(run.stdout)
    assert result["type"] == "result", result
    assert result["subtype"] == "success" and not result["is_error"], result
    assert result["api_error_status"] is None and result["stop_reason"] == "end_turn", result
    assert result["result"].strip(), result
    # Answered 200, once: a stream Claude Code gave up on shows as a 499, then its retry.
    assert statuses == ["200"], (statuses, log[-3000:])
    assert "model=claude-opus" in log, log[-3000:]  # the name Claude Code sent, echoed
    assert "Traceback" not in log, log[-3000:]
