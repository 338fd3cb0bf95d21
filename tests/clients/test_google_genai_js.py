"""@google/genai (npm, the SDK Gemini CLI is built on) as the oracle of Parlance's Gemini
API: the same calls as the Python SDK's test (text, streaming, a forced function call
and the turn after it, structured output by JSON Schema and by Gemini's Schema,
thinking, token counts, embeddings, the model list, a refusal raised as `ApiError`),
once on a model that answers in the shape asked for and once on SmolLM2."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.client_runs import no_errors
from tests.support.live_server import ServerThread
from tests.support.npm import npm_package
from tests.support.shaped_model import ANSWER, PERSON, THOUGHT, ShapedModel

pytestmark = [pytest.mark.clients]

GOOGLE_GENAI_JS_VERSION = "3.3.0"
SCRIPT = Path(__file__).parent / "scripts" / "google_genai_calls.mjs"


@pytest.fixture(scope="module")
def client_dir() -> Path:
    return npm_package("@google/genai", GOOGLE_GENAI_JS_VERSION)


def run(client_dir: Path, base_url: str, model: str, *parts: str) -> dict:
    node = shutil.which("node")
    assert node is not None  # (npm_package skipped already without npm)
    done = subprocess.run(
        [node, "--input-type=module", "-e", SCRIPT.read_text()], cwd=client_dir,
        capture_output=True, text=True, timeout=1800,
        env={"PATH": "/usr/bin:/bin", "PARLANCE_URL": base_url, "PARLANCE_MODEL": model,
             "PARLANCE_PARTS": ",".join(parts)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_call_parses_on_a_model_that_answers_in_shape(client_dir):
    spec = ModelSpec(id="shaped", locate=lambda: Path("/dev/null"))
    models = ServedModels([ServedModel(spec, ShapedModel(), 1700000000)])
    with ServerThread(create_app(models, ServerSettings())) as server:
        report = run(client_dir, server.base_url, "shaped")
    no_errors(report)
    assert report["text"]["text"] == "Hello there!" and report["text"]["finish"] == "STOP"
    assert report["text"]["model_version"] == "shaped" and report["text"]["response_id"]
    assert report["stream"]["text"] == "Hello there!" and report["stream"]["chunks"] > 1
    calls = report["forced_call"]["calls"]
    assert [(c["name"], c["args"]) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert calls[0]["id"] and report["forced_call"]["followed"] == "STOP"
    assert report["structured"] == {"json_schema": PERSON, "schema": PERSON}
    assert report["thinking"]["thoughts"] == [THOUGHT]
    assert report["thinking"]["answer"] == ANSWER
    assert report["thinking"]["signed"] == [False, True]
    assert report["thinking"]["thoughts_tokens"] == 7 and report["thinking"]["again"] == "STOP"
    assert report["count"]["total"] >= 1
    assert report["embed"]["sizes"] == [8, 8]
    assert report["models"] == {"listed": ["models/shaped"], "one": "models/shaped"}
    assert report["refused"]["status"] == 404


@pytest.mark.model
def test_the_js_sdk_on_smollm2(client_dir, smollm2_server):
    report = run(client_dir, smollm2_server.base_url, "smollm2-135m-instruct", "text",
                 "stream", "forced_call", "structured", "thinking", "count", "embed",
                 "refused")
    no_errors(report)
    assert report["text"]["text"].strip() and report["text"]["total"] > 0
    assert report["stream"]["text"].strip()
    calls = report["forced_call"]["calls"]
    assert len(calls) == 1 and calls[0]["name"] == "get_weather"
    assert set(calls[0]["args"]) == {"city"}, calls  # the grammar's promise
    assert set(report["structured"]["json_schema"]) == {"name", "age"}
    assert set(report["structured"]["schema"]) == {"name", "age"}
    assert report["count"]["total"] >= 5
    assert report["embed"]["sizes"] == [8, 8]
    assert report["refused"]["status"] == 404
