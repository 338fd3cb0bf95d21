"""Gemini CLI (npm `@google/gemini-cli`) pointed at Parlance by its base-URL setting
(`GOOGLE_GEMINI_BASE_URL`, with `GEMINI_API_KEY` and the `gemini-api-key` auth type
selected in its settings, as docs/apis/gemini.md tells users), running one
non-interactive turn (`gemini -p … --yolo -o json`).

On the scripted model (`tests/support/scripted_agent.py`), asked to create `hello.txt`
containing `hi`: Gemini CLI's first prompt, with its system prompt and every tool's
schema, is far beyond what SmolLM2 evaluates on two busy cores within a turn, so that
run tests the protocol: every request answered 2xx, the streamed function call parsed
and run by Gemini CLI (the file exists), the turn a success. On SmolLM2, one real turn
answered in text, with its tools switched off in settings (a 135M model does not pick
tools) and its system prompt replaced by a line (`GEMINI_SYSTEM_MD`): the built-in one
alone is some 6k tokens, over half an hour of prompt evaluation on a busy 2-core box.
Gemini CLI may retry an answer it finds unusable (its own check of the model's text):
the turn must still end in an answer."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.client_runs import SERVE_ARGS, answered, assert_all_succeeded
from tests.support.npm import npm_bin
from tests.support.scripted_agent import (
    FILE_NAME,
    FILE_TEXT,
    agent_server,
    assert_protocol_held,
)
from tests.support.serve_process import ServeProcess, serve

pytestmark = [pytest.mark.clients]

GEMINI_CLI_VERSION = "0.61.0"
RUN_TIMEOUT = 1800


@pytest.fixture(scope="module")
def gemini() -> Path:
    return npm_bin("@google/gemini-cli", GEMINI_CLI_VERSION, "gemini")


def gemini_env(home: Path, base_url: str, settings: dict | None = None) -> dict[str, str]:
    """Gemini CLI's environment and settings for a Parlance server at `base_url`."""
    config = home / ".gemini"
    config.mkdir(parents=True, exist_ok=True)
    (config / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        **(settings or {})}))
    return {**os.environ, "HOME": str(home), "GEMINI_API_KEY": "unused",
            "GOOGLE_GEMINI_BASE_URL": base_url, "GEMINI_CLI_NO_RELAUNCH": "true",
            "NO_BROWSER": "true", "CI": "1", "GEMINI_CLI_TRUST_WORKSPACE": "true"}


def run_turn(gemini: Path, work: Path, env: dict[str, str], model: str,
             prompt: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(gemini), "--yolo", "-o", "json", "-m", model, "-p", prompt],
        cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=RUN_TIMEOUT)


def test_gemini_cli_writes_a_file_through_parlance(gemini, agent_dirs):
    home, work = agent_dirs
    with agent_server(work, frozenset({"write_file"})) as (server, model, access):
        run = run_turn(gemini, work, gemini_env(home, server.base_url), "fake-model",
                       f"Create {FILE_NAME} containing {FILE_TEXT}")
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    answer = json.loads(run.stdout)
    assert answer["response"], answer
    assert model.calls_made >= 1
    assert (work / FILE_NAME).read_text().strip() == FILE_TEXT, run.stdout[-3000:]
    assert_protocol_held(access, {"/v1beta/models/fake-model:streamGenerateContent",
                                  "/v1beta/models/fake-model:generateContent",
                                  "/v1beta/models/fake-model:countTokens"})


@pytest.fixture(scope="module")
def smollm2_for_gemini(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """SmolLM2 with its whole trained context; every Gemini model name Gemini CLI asks
    for is SmolLM2."""
    with serve(tmp_path_factory.mktemp("gemini-cli-server"), *SERVE_ARGS, "--ctx-size",
               "8192", "--model-alias", "gemini-*=smollm2-135m-instruct") as running:
        yield running


@pytest.mark.model
def test_gemini_cli_takes_a_real_turn_on_smollm2(gemini, agent_dirs, smollm2_for_gemini):
    home, work = agent_dirs
    system = home / "system.md"
    system.write_text("You are a helpful assistant. Answer briefly.\n")
    env = {**gemini_env(home, smollm2_for_gemini.base_url, {"tools": {"core": []}}),
           "GEMINI_SYSTEM_MD": str(system)}
    run = run_turn(gemini, work, env, "smollm2-135m-instruct", "Say hello in one word.")
    log = smollm2_for_gemini.output()
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:], log[-3000:])
    assert json.loads(run.stdout)["response"].strip()
    asked = {path for _, path, _ in answered(log) if path != "/health"}
    assert asked and all(p.startswith("/v1beta/models/") for p in asked), asked
    assert_all_succeeded(log, paths=asked)
