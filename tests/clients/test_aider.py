"""aider (PyPI `aider-chat`, in its own venv) runs one non-interactive turn (`aider
--message "…"`) with its OpenAI-compatible settings pointed at Parlance
(`OPENAI_API_BASE`, `OPENAI_API_KEY`, `--model openai/<name>`), asked to create
`hello.txt` containing `hi`. aider sends no tools: it reads its edits from the answer's
text, in its "whole" edit format here.

Its first prompt is short (673 tokens with `--no-git`, no repository map), so it
runs on SmolLM2, with `max_tokens` from a model-settings file (aider sends none, and
SmolLM2 may never stop): the turn ends without a protocol error and every request is
answered 2xx; whether SmolLM2 writes the file is its own business. The fake engine,
scripted to answer with a whole-file edit, shows the edit path: aider parses the
streamed answer and writes the file."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.client_runs import assert_all_succeeded
from tests.support.pypi import pypi_venv
from tests.support.scripted_agent import (
    FILE_NAME,
    FILE_TEXT,
    agent_server,
    assert_protocol_held,
)

pytestmark = [pytest.mark.clients]

AIDER_VERSION = "0.86.2"
RUN_TIMEOUT = 1800
TASK = f"Create {FILE_NAME} containing {FILE_TEXT}"
SETTINGS = """\
- name: openai/{model}
  edit_format: whole
  extra_params:
    max_tokens: 120
    temperature: 0
"""


@pytest.fixture(scope="module")
def aider() -> Path:
    return pypi_venv("aider-chat", AIDER_VERSION, f"aider-chat=={AIDER_VERSION}") / "aider"


def run_aider(aider: Path, base_url: str, model: str, home: Path, work: Path):
    settings = home / "models.yml"
    settings.write_text(SETTINGS.format(model=model))
    env = {**os.environ, "HOME": str(home), "OPENAI_API_BASE": f"{base_url}/v1",
           "OPENAI_API_KEY": "unused",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # no fetch of LiteLLM's price list
    return subprocess.run(
        [str(aider), "--model", f"openai/{model}", "--model-settings-file", str(settings),
         "--no-git", "--yes-always", "--no-check-update", "--no-analytics",
         "--no-show-model-warnings", "--no-pretty", "--message", TASK],
        cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=RUN_TIMEOUT)


@pytest.mark.model
def test_aider_completes_a_turn_on_smollm2(aider, smollm2_server, agent_dirs):
    home, work = agent_dirs
    run = run_aider(aider, smollm2_server.base_url, "smollm2-135m-instruct", home, work)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    # aider reports an answer it accepted by its size, or one cut at max_tokens
    # (finish_reason "length": SmolLM2's greedy words decide which) as a token limit
    # hit; a protocol error is a `litellm.…Error` line instead
    assert (re.search(r"Tokens: \S+ sent, \S+ received", run.stdout)
            or "has hit a token limit" in run.stdout), run.stdout[-3000:]
    assert "litellm." not in run.stdout, run.stdout[-3000:]
    assert_all_succeeded(smollm2_server.output(), paths={"/v1/chat/completions"})


def test_aider_applies_a_streamed_whole_file_edit(aider, agent_dirs):
    home, work = agent_dirs
    edit = f"{FILE_NAME}\n```\n{FILE_TEXT}\n```\n"
    with agent_server(work, frozenset(), reply=edit) as (fake, _, access):
        run = run_aider(aider, fake.base_url, "fake-model", home, work)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert f"Applied edit to {FILE_NAME}" in run.stdout, run.stdout[-3000:]
    assert_protocol_held(access, {"/v1/chat/completions"})
    assert (work / FILE_NAME).read_text().strip() == FILE_TEXT
