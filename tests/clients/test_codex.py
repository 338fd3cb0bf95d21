"""OpenAI's Codex CLI (npm `@openai/codex`) runs a turn against Parlance, over HTTP
streaming and over the Responses WebSocket mode, with its default tools and
configuration: the turn completes with no protocol error and no retry. SmolLM2
answers whatever it answers; what is tested is that Codex accepts every byte. A session
past Codex's auto-compact limit (on the scripted engine: the protocol is what is tested)
compacts before its next turn and goes on."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_clients import CODEX_VERSION, codex_config
from tests.support.npm import npm_bin
from tests.support.scripted_agent import DONE, agent_server, assert_protocol_held
from tests.support.serve_process import ServeProcess, serve

pytestmark = [pytest.mark.clients]

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


@pytest.mark.model
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


def run_codex(codex: Path, home: Path, work: Path, *args: str) -> list[dict[str, Any]]:
    """`codex exec … --json`'s events; the run must succeed."""
    run = subprocess.run(
        [str(codex), "exec", *args], cwd=work, env={**os.environ, "CODEX_HOME": str(home)},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TURN_TIMEOUT)
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    failures = [e for e in events if e.get("type") in ("turn.failed", "error")]
    assert not failures, (failures, run.stderr[-3000:])
    assert run.returncode == 0, run.stderr[-3000:]
    return events


# Codex's first prompt alone is thousands of the scripted engine's tokens (words): any
# second turn is past this limit, so Codex compacts before it.
COMPACT_LIMIT = 1000


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_a_session_past_the_compact_limit_compacts_and_resumes(codex, agent_dirs, transport):
    """Issue 39: Codex's compaction turn is a `/v1/responses` request with `tools: []`
    and `tool_choice: "auto"`; refused, it ended every long session."""
    home, work = agent_dirs
    with agent_server(work, frozenset()) as (server, model, access):
        (home / "config.toml").write_text(codex_config(
            server.base_url, websockets=transport == "websocket", model="fake-model",
            extra=(f"model_auto_compact_token_limit = {COMPACT_LIMIT}",)))
        first = run_codex(codex, home, work, "--skip-git-repo-check", "--sandbox",
                          "read-only", "--json", "Say hello.")
        resumed = run_codex(codex, home, work, "resume", "--last", "--skip-git-repo-check",
                            "--json", "Say it again.")
        requests = list(model.requests)
    for events in (first, resumed):
        assert "turn.completed" in [e.get("type") for e in events], events
    assert sum(not r.tools for r in requests) >= 1, [len(r.tools) for r in requests]
    compacted = [r for r in requests if not r.tools]
    assert all(r.tool_choice.mode == "none" for r in compacted)
    replies = [e["item"]["text"] for e in resumed if e.get("type") == "item.completed"
               and e["item"].get("type") == "agent_message"]
    assert replies and replies[-1] == DONE, resumed
    paths = {"/v1/responses"}
    assert_protocol_held(access, paths)
    if transport == "websocket":
        assert any(a.get("method") == "WS" for a in access.lines), access.lines
