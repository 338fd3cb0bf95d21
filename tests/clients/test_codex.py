"""OpenAI's Codex CLI (npm `@openai/codex`) runs a turn against Parlance, over HTTP
streaming and over the Responses WebSocket mode, with its default tools and
configuration: the turn completes with no protocol error and no retry. SmolLM2
answers whatever it answers; what is tested is that Codex accepts every byte."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_clients import CODEX_VERSION, codex_config
from tests.support.npm import npm_bin
from tests.support.serve_process import ServeProcess, serve

pytestmark = [pytest.mark.clients, pytest.mark.model]

# Codex's first prompt is ~8.9k tokens in SmolLM2's template (instructions and tool
# schemas), beyond the 8192 it was trained for. Evaluating it takes minutes on two
# busy cores, hence the long request timeout; both transports share one server (and
# one working directory), so the second run finds the prompt cached.
SERVE_ARGS = ("--ctx-size", "16384", "--parallel", "1", "--request-timeout", "1800")
TURN_TIMEOUT = 1800


@pytest.fixture(scope="module")
def codex() -> Path:
    return npm_bin("@openai/codex", CODEX_VERSION, "codex")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with serve(tmp_path_factory.mktemp("codex-server"), *SERVE_ARGS) as running:
        yield running


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("codex-work")


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_codex_exec_completes_a_turn(codex, server, workdir, tmp_path, transport):
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        codex_config(server.base_url, websockets=transport == "websocket"))
    run = subprocess.run(
        [str(codex), "exec", "--skip-git-repo-check", "--sandbox", "read-only", "--json",
         "Say hello in one short sentence."],
        cwd=workdir, env={**os.environ, "CODEX_HOME": str(home)}, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=TURN_TIMEOUT)
    log = server.output()
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    kinds = [e.get("type") for e in events]
    # "error" events include Codex's own reconnect notices: a retry is a protocol failure.
    failures = [e for e in events if e.get("type") in ("turn.failed", "error")]
    assert not failures, (failures, run.stderr[-2000:], log[-3000:])
    assert "turn.completed" in kinds, (kinds, run.stderr[-2000:], log[-3000:])
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Traceback" not in log, log[-3000:]
    if transport == "websocket":  # Codex used the WebSocket mode, not a fallback to HTTP
        assert "method=WS path=/v1/responses status=200" in log, log[-3000:]
