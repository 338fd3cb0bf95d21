"""mistral-vibe (PyPI `mistral-vibe`, in its own Python 3.12+ venv) runs one headless
turn (`vibe -p "…" --output json --auto-approve`) with a generic OpenAI-compatible
provider pointed at Parlance in `$VIBE_HOME/config.toml`, asked to create `hello.txt`
containing `hi`. Its first request carries its tools, among them `todo`, whose schema
holds `$defs` references (a 400 from Parlance once: the grammar's pointers were wrong).

Against the fake engine, scripted to call vibe's `write_file` tool and then answer: the
first prompt is its system prompt and 10 tool schemas, 8.3k tokens of SmolLM2's
vocabulary (measured: 4.7k of messages, 3.5k of schemas), which take half a minute to
evaluate on a quiet 2-core machine and several minutes on a busy one, and SmolLM2 does
not write the file when it gets there. What this tests is the protocol:
every request answered 2xx, the streamed call parsed and run (the file exists).
mistral-vibe 3.0.3 cannot be installed (it pins `certifi==2026.10.19`, which PyPI does
not have); 3.0.2 is the newest that installs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.pypi import pypi_venv
from tests.support.scripted_agent import (
    FILE_NAME,
    FILE_TEXT,
    agent_server,
    assert_protocol_held,
)

pytestmark = [pytest.mark.clients]

MISTRAL_VIBE_VERSION = "3.0.2"
RUN_TIMEOUT = 900


def vibe_config(base_url: str) -> str:
    return f"""\
active_model = "parlance"

[[providers]]
name = "parlance"
api_base = "{base_url}/v1"
api_key_env_var = "PARLANCE_API_KEY"
backend = "generic"

[[models]]
name = "fake-model"
provider = "parlance"
alias = "parlance"
"""


@pytest.fixture(scope="module")
def vibe() -> Path:
    return pypi_venv("mistral-vibe", MISTRAL_VIBE_VERSION,
                     f"mistral-vibe=={MISTRAL_VIBE_VERSION}", min_minor=12) / "vibe"


def test_mistral_vibe_writes_a_file_through_parlance(vibe, agent_dirs):
    home, work = agent_dirs
    (home / ".vibe").mkdir()
    with agent_server(work, frozenset({"write_file"})) as (server, model, access):
        (home / ".vibe" / "config.toml").write_text(vibe_config(server.base_url))
        env = {**os.environ, "HOME": str(home), "VIBE_HOME": str(home / ".vibe"),
               "PARLANCE_API_KEY": "unused"}
        run = subprocess.run(
            [str(vibe), "-p", f"Create {FILE_NAME} containing {FILE_TEXT}", "--output", "json",
             "--auto-approve", "--trust", "--max-turns", "4"],
            cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=RUN_TIMEOUT)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    entries = json.loads(run.stdout)
    assert entries[-1]["role"] == "assistant", entries[-1]
    assert entries[-1]["generationStatus"] == "completed", entries[-1]
    assert_protocol_held(access, {"/v1/chat/completions"})
    assert model.calls_made >= 1
    assert (work / FILE_NAME).read_text().strip() == FILE_TEXT, run.stdout[-3000:]
