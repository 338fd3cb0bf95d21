"""google-genai (PyPI, in its own venv) as the oracle of Parlance's Gemini API: text,
streaming, a forced function call and the turn after it, structured output
(`response_schema` parsed into a pydantic model, and `response_json_schema`), thinking
(thought parts, their signature, the turn replayed), token counts, embeddings, the model
list and a refusal raised as `APIError`. Every response is validated by the SDK's types.

Once on a model that answers each call in the shape it asks for (`ShapedModel`, over the
server's real HTTP stack: what the SDK parses is the point), and once on SmolLM2, where
the forced call and the structured output are grammar-guaranteed and thinking is asked
of a model that does not think (a preference: it answers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.client_runs import assert_all_succeeded, no_errors, run_script
from tests.support.live_server import ServerThread
from tests.support.pypi import pypi_venv
from tests.support.shaped_model import ANSWER, PERSON, THOUGHT, ShapedModel

pytestmark = [pytest.mark.clients]

GOOGLE_GENAI_VERSION = "3.6.1"
# (the Python SDK asks `v1`, the JS SDK and Gemini CLI `v1beta`)
GEMINI_PATHS = {f"/{version}/models/smollm2-135m-instruct:{method}"
                for version in ("v1", "v1beta")
                for method in ("generateContent", "streamGenerateContent", "countTokens",
                               "batchEmbedContents")}


@pytest.fixture(scope="module")
def venv() -> Path:
    return pypi_venv("google-genai", GOOGLE_GENAI_VERSION,
                     f"google-genai=={GOOGLE_GENAI_VERSION}")


def run(venv: Path, base_url: str, model: str, *parts: str) -> dict:
    return run_script(venv, "google_genai_calls.py", base_url,
                      extra={"PARLANCE_MODEL": model, "PARLANCE_PARTS": ",".join(parts)})


def test_every_call_parses_on_a_model_that_answers_in_shape(venv):
    spec = ModelSpec(id="shaped", locate=lambda: Path("/dev/null"))
    models = ServedModels([ServedModel(spec, ShapedModel(), 1700000000)])
    with ServerThread(create_app(models, ServerSettings())) as server:
        report = run(venv, server.base_url, "shaped")
    no_errors(report)
    assert report["text"]["text"] == "Hello there!" and report["text"]["finish"] == "STOP"
    assert report["text"]["model_version"] == "shaped" and report["text"]["response_id"]
    assert report["stream"]["text"] == "Hello there!" and report["stream"]["chunks"] > 1
    call = report["forced_call"]["calls"]
    assert [(c["name"], c["args"]) for c in call] == [("get_weather", {"city": "Paris"})]
    assert call[0]["id"] and report["forced_call"]["followed"] == "STOP"
    assert report["structured"]["parsed"] == PERSON
    assert report["thinking"]["thoughts"] == [THOUGHT]
    assert report["thinking"]["answer"] == ANSWER
    assert report["thinking"]["signed"] == [False, True]  # on the first part after them
    assert report["thinking"]["thoughts_tokens"] == 7 and report["thinking"]["again"] == "STOP"
    assert report["count"]["total"] >= 1
    assert report["embed"]["sizes"] == [8, 8]
    assert report["models"]["listed"] == ["models/shaped"] == [report["models"]["one"]]
    assert report["refused"]["code"] == 404 and report["refused"]["status"] == "NOT_FOUND"


@pytest.mark.model
def test_the_sdk_on_smollm2(venv, smollm2_server):
    report = run(venv, smollm2_server.base_url, "smollm2-135m-instruct", "text", "stream",
                 "forced_call", "structured", "thinking", "count", "embed", "refused")
    no_errors(report)
    assert report["text"]["text"].strip() and report["text"]["total"] > 0
    assert report["stream"]["text"].strip()
    call = report["forced_call"]["calls"]
    assert len(call) == 1 and call[0]["name"] == "get_weather"
    assert set(call[0]["args"]) == {"city"}, call  # the grammar's promise
    assert set(report["structured"]["parsed"]) == {"name", "age"}
    assert report["thinking"]["answer"].strip() or report["thinking"]["thoughts"]
    assert report["count"]["total"] >= 5
    assert report["embed"]["sizes"] == [8, 8]
    assert report["refused"]["status"] == "NOT_FOUND"
    assert_all_succeeded(
        "\n".join(line for line in smollm2_server.output().splitlines()
                  if "no-such-model" not in line),
        paths=GEMINI_PATHS)
